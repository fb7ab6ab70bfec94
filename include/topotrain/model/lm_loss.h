// Next-token cross-entropy that never materialises the [tokens, vocab] fp32 logits.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "topotrain/model/packed_batch.h"
#include "topotrain/model/qwen3.h"

namespace topotrain::model {

// Sum over rows of -log softmax(hidden W^T)[target], computed `chunk_rows` rows at a
// time. When hidden or weight requires grad, the gradients are computed chunk by chunk
// during the forward and only scaled in backward, so peak extra memory is one chunk of
// fp32 logits instead of all of them (autograd would keep every chunk's softmax).
// hidden [N, H] and weight [V, H] share the compute dtype; targets int64 [N].
// Returns an fp32 scalar.
torch::Tensor linear_cross_entropy_sum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& targets, int64_t chunk_rows);

struct LmLoss {
  torch::Tensor loss_sum;   // fp32 scalar, differentiable
  int64_t num_targets = 0;  // tokens that had a target; the trainer divides by the global count
};

// Next-token loss within documents: the last token of each document has no target.
LmLoss lm_loss(Qwen3CausalLMImpl& model, const torch::Tensor& hidden, const PackedBatch& batch,
               int64_t chunk_rows = 4096);

}  // namespace topotrain::model
