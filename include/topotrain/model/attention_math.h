// Attention in plain torch ops on any device and dtype, what a query sees given as a mask: the
// one math path behind every attention of the model code (packed causal documents on the CPU,
// KV-cached decoding steps, DFlash blocks) and the reference the fused kernels are tested against.
//
// Numerics: scores and the output in the inputs' dtype, softmax in fp32 as HF's eager attention
// (fp64 stays fp64, so that the fp64 tests compare layouts exactly: torch's fp32 softmax backward
// rounds differently for rows of different lengths, as a padded window's are).
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace topotrain::model {

// softmax(scale * q k^T, masked) v. q [..., Hq, Sq, D], k and v [..., Hkv, Sk, D] with the same
// leading dimensions; Hq a multiple of Hkv, query head h reading kv head h / (Hq / Hkv) as HF's
// repeat_kv groups them (no copy of k and v per query head). `hidden`: bool, broadcastable to
// [..., Sq, Sk] (the same for every head), true where a query does not see a key; every query
// must see at least one. Returns [..., Hq, Sq, D] in q's dtype; differentiable.
torch::Tensor attention_math(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& hidden, double scale);

// The causal mask of `queries` queries that are the last of `keys` positions: bool [queries,
// keys], true where the key comes after the query (queries == keys: strictly above the diagonal).
torch::Tensor future_keys(int64_t queries, int64_t keys, const torch::Device& device);

}  // namespace topotrain::model
