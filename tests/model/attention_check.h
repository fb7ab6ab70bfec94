// Shared by the CPU and GPU attention tests: cu_seqlens of document lengths, and one
// forward+backward of packed attention on fresh leaves.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "topotrain/model/attention.h"

namespace topotrain::model::test_support {

inline torch::Tensor cu_seqlens_of(const std::vector<int64_t>& lengths, const torch::Device& device) {
  std::vector<int32_t> cu{0};
  for (int64_t len : lengths) cu.push_back(cu.back() + static_cast<int32_t>(len));
  return torch::tensor(cu, torch::kInt32).to(device);
}

struct AttentionResult {
  torch::Tensor out, dq, dk, dv;
};

// q [T, Hq, D]; kv [T, 2 * Hkv, D], k heads first: v reaches attention as a column slice of
// a wider tensor, as the fused q/k/v projection hands it over. Gradients of sum(out * dout).
inline AttentionResult attend(const torch::Tensor& q0, const torch::Tensor& kv0, const torch::Tensor& dout,
                              const DocumentLayout& layout, double scale) {
  auto q = q0.detach().clone().requires_grad_();
  auto kv = kv0.detach().clone().requires_grad_();
  const int64_t kv_heads = kv0.size(1) / 2;
  auto out = varlen_causal_attention(q, kv.narrow(1, 0, kv_heads), kv.narrow(1, kv_heads, kv_heads), layout, scale);
  (out * dout).sum().backward();
  auto dkv = kv.grad();
  return {out.detach(), q.grad(), dkv.narrow(1, 0, kv_heads), dkv.narrow(1, kv_heads, kv_heads)};
}

}  // namespace topotrain::model::test_support
