// Rotate-half rotary position embeddings (RoPE), Llama 3's frequency scaling of them, and
// Qwen3's per-head norm before them.
#pragma once

#include <cstdint>
#include <optional>

#include <torch/torch.h>

#include "topotrain/model/config.h"

namespace topotrain::model {

// RoPE's inverse frequencies, fp32 [head_dim / 2] on `device`: theta^(-2i / head_dim), then
// Llama 3's scaling where given, in HF's order of fp32 operations.
torch::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const std::optional<Llama3RopeScaling>& scaling,
                                       const torch::Device& device);

// cos/sin of rotate-half RoPE for each token's position, [T, 1, head_dim] in `dtype`
// (computed in fp32 first, as HF does).
struct RotaryTables {
  torch::Tensor cos, sin;
};
RotaryTables rotary_tables(const torch::Tensor& positions, const torch::Tensor& inverse_frequencies,
                           torch::ScalarType dtype);
// The tables of `config`'s RoPE (head_dim, rope_theta, rope_scaling).
RotaryTables rotary_tables(const torch::Tensor& positions, const ModelConfig& config, torch::ScalarType dtype);
torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& tables);  // x [T, heads, head_dim]

// apply_rotary(rms_norm(x, norm_weight, eps), tables): Qwen3's q_norm/k_norm then RoPE; with
// norm_weight undefined (a family without q/k norms: Llama, Qwen2) apply_rotary(x, tables).
// x [T, heads, head_dim] may be a column slice of a fused projection (heads and head_dim
// packed, any token stride). For bf16 on CUDA with head_dim in {64, 128, 192, 256} one kernel
// each way (a warp per row, fp32 throughout, one rounding) replaces the norm's kernels and
// the five of the rotation; the result is contiguous either way.
torch::Tensor norm_rotary(const torch::Tensor& x, const torch::Tensor& norm_weight, double eps,
                          const RotaryTables& tables);

// The attention heads of a fused q/k/v projection's output [T, (Hq + 2 Hkv) * head_dim], laid
// out q | k | v: q and k through norm_rotary with their norms' weights (Qwen3 gives both norms
// one eps; both undefined without q/k norms), v as it is (a view). Where norm_rotary's kernel applies, one autograd function
// covers all three, and its backward writes dq, dk and dv straight into one gradient of the
// projection output instead of split's backward concatenating them in a further pass.
struct RotatedHeads {
  torch::Tensor q, k, v;  // [T, Hq, D], [T, Hkv, D], [T, Hkv, D]
};
RotatedHeads rotated_heads(const torch::Tensor& fused, int64_t q_heads, int64_t kv_heads,
                           const torch::Tensor& q_norm_weight, const torch::Tensor& k_norm_weight, double eps,
                           const RotaryTables& tables);

}  // namespace topotrain::model
