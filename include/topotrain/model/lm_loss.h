// Next-token cross-entropy that never materialises the [tokens, vocab] fp32 logits.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "topotrain/batch/packed_batch.h"
#include "topotrain/model/causal_lm.h"

namespace topotrain::model {

struct LinearCrossEntropyOptions {
  int64_t chunk_rows = 4096;
  // fp32 [N]: row i contributes row_weights[i] * loss_i. Undefined: every row weighs 1.
  torch::Tensor row_weights;
  // [N, H] in the compute dtype. When given, the target of row i is the distribution
  // softmax(teacher_hidden[i] W^T) instead of targets[i], and loss_i is
  // KL(teacher || model) = cross-entropy minus the teacher's entropy (0 when they agree).
  // No gradient flows into it.
  torch::Tensor teacher_hidden;
  bool argmax = false;  // also return the model's most likely token per row
  // [V, H] in hidden's dtype: the weight's values, already cast (a kept copy of an fp32
  // master, ComputeWeight::values), used instead of casting the weight on every call. No
  // gradient flows into it; the weight's gradient still goes to `weight`.
  torch::Tensor weight_in_compute_dtype;
};

struct LinearCrossEntropy {
  torch::Tensor loss;    // fp32 scalar: sum over rows of row_weights[i] * loss_i, differentiable
  torch::Tensor argmax;  // int64 [N] when options.argmax, else empty
};

// Sum over rows of -log softmax(hidden W^T)[target] (or the KL above), computed
// `chunk_rows` rows at a time. The gradients of hidden and weight (each only when it
// requires grad) are computed chunk by chunk during the forward and only scaled in
// backward, so peak extra memory is one chunk of fp32 logits instead of all of them
// (autograd would keep every chunk's softmax). hidden [N, H] is in the compute dtype; weight
// [V, H] in it or in fp32 (a master weight, whose gradient then comes back in fp32 with no
// cast through the compute dtype); targets int64 [N] (may be undefined with teacher_hidden).
LinearCrossEntropy linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                        const torch::Tensor& targets, const LinearCrossEntropyOptions& options);

// The unweighted hard-target sum, an fp32 scalar.
torch::Tensor linear_cross_entropy_sum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& targets, int64_t chunk_rows);

struct LmLoss {
  torch::Tensor loss_sum;   // fp32 scalar, differentiable
  int64_t num_targets = 0;  // tokens that had a target; the trainer divides by the global count
};

// Next-token loss within documents: the last token of each document has no target.
LmLoss lm_loss(CausalLMImpl& model, const torch::Tensor& hidden, const PackedBatch& batch,
               int64_t chunk_rows = 4096);

}  // namespace topotrain::model
