#include "topotrain/model/attention.h"

#include <limits>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/torch_compat.h"

namespace topotrain::model {
namespace {

torch::Tensor math_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& cu_seqlens, double scale) {
  const int64_t groups = q.size(1) / k.size(1);
  const auto cu = cu_seqlens.to(torch::kCPU).to(torch::kInt64);
  const auto* bounds = cu.data_ptr<int64_t>();
  std::vector<torch::Tensor> outputs;
  outputs.reserve(cu.size(0) - 1);
  for (int64_t d = 0; d + 1 < cu.size(0); ++d) {
    const int64_t begin = bounds[d], len = bounds[d + 1] - begin;
    auto qd = q.narrow(0, begin, len).transpose(0, 1);  // [Hq, L, D]
    auto kd = k.narrow(0, begin, len).transpose(0, 1).repeat_interleave(groups, 0);
    auto vd = v.narrow(0, begin, len).transpose(0, 1).repeat_interleave(groups, 0);
    auto scores = torch::matmul(qd, kd.transpose(1, 2)) * scale;
    auto future = torch::ones({len, len}, q.options().dtype(torch::kBool)).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
    // Softmax in fp32 as HF's eager path does, then back to the compute dtype.
    auto probs = torch::softmax(scores, -1, torch::kFloat32).to(q.scalar_type());
    outputs.push_back(torch::matmul(probs, vd).transpose(0, 1));
  }
  return torch::cat(outputs, 0);
}

#if TOPOTRAIN_HAS_FLASH_VARLEN
torch::Tensor flash_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& cu_seqlens, int64_t max_seqlen, double scale) {
  // The kernel takes any row and head strides with a dense last dimension: v, a column slice of
  // the fused q/k/v projection, goes in without a copy.
  auto rows = [](const torch::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); };
  // Arguments after `scale` (window sizes, seqused_k, alibi...) keep their defaults, which
  // also keeps this call valid when later releases append more defaulted arguments.
  auto result = at::_flash_attention_forward(rows(q), rows(k), rows(v), cu_seqlens, cu_seqlens,
                                             max_seqlen, max_seqlen, /*dropout_p=*/0.0, /*is_causal=*/true,
                                             /*return_debug_mask=*/false, scale);
  return std::get<0>(result);
}
#endif

}  // namespace

std::string to_string(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::math_per_document:
      return "math (per document)";
    case AttentionBackend::flash_varlen:
      return "flash varlen (at::_flash_attention_forward)";
  }
  return "unknown";
}

AttentionBackend choose_attention_backend(const torch::Device& device, torch::ScalarType dtype, int64_t head_dim) {
  const bool half = dtype == torch::kBFloat16 || dtype == torch::kFloat16;
  if (compat::kHasFlashVarlen && device.is_cuda() && half && head_dim % 8 == 0 && head_dim <= 256) {
    return AttentionBackend::flash_varlen;
  }
  return AttentionBackend::math_per_document;
}

torch::Tensor varlen_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& cu_seqlens, int64_t max_seqlen, double scale,
                                      AttentionBackend backend) {
  if (q.dim() != 3 || k.dim() != 3 || k.sizes() != v.sizes() || q.size(1) % k.size(1) != 0) {
    throw std::invalid_argument(cat("varlen_causal_attention: expected q [T, Hq, D], k/v [T, Hkv, D] with Hq a "
                                    "multiple of Hkv, got q ",
                                    q.sizes(), ", k ", k.sizes(), ", v ", v.sizes()));
  }
  switch (backend) {
    case AttentionBackend::math_per_document:
      return math_attention(q, k, v, cu_seqlens, scale);
    case AttentionBackend::flash_varlen:
#if TOPOTRAIN_HAS_FLASH_VARLEN
      return flash_attention(q, k, v, cu_seqlens, max_seqlen, scale);
#else
      throw std::runtime_error("varlen_causal_attention: this build has no flash varlen kernel (needs CUDA LibTorch >= 2.5)");
#endif
  }
  throw std::logic_error("varlen_causal_attention: unknown backend");
}

}  // namespace topotrain::model
