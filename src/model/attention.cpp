#include "topotrain/model/attention.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/torch_compat.h"

namespace topotrain::model {
namespace {

// Dense causal attention in plain ops: q [B, Hq, S, D], k and v [B, Hkv, S, D].
torch::Tensor dense_causal_math(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                double scale) {
  const int64_t groups = q.size(1) / k.size(1), len = q.size(2);
  auto scores = torch::matmul(q, k.repeat_interleave(groups, 1).transpose(2, 3)) * scale;
  auto future = torch::ones({len, len}, q.options().dtype(torch::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  // Softmax in fp32 as HF's eager path does, then back to the compute dtype.
  auto probs = torch::softmax(scores, -1, torch::kFloat32).to(q.scalar_type());
  return torch::matmul(probs, v.repeat_interleave(groups, 1));
}

torch::Tensor math_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& cu_seqlens, double scale) {
  const auto cu = cu_seqlens.to(torch::kCPU).to(torch::kInt64);
  const auto* bounds = cu.data_ptr<int64_t>();
  // [len, heads, D] -> [1, heads, len, D]
  auto document = [](const torch::Tensor& t, int64_t begin, int64_t len) {
    return t.narrow(0, begin, len).transpose(0, 1).unsqueeze(0);
  };
  std::vector<torch::Tensor> outputs;
  outputs.reserve(cu.size(0) - 1);
  for (int64_t d = 0; d + 1 < cu.size(0); ++d) {
    const int64_t begin = bounds[d], len = bounds[d + 1] - begin;
    auto out = dense_causal_math(document(q, begin, len), document(k, begin, len), document(v, begin, len), scale);
    outputs.push_back(out.squeeze(0).transpose(0, 1));
  }
  return torch::cat(outputs, 0);
}

// q [B, Hq, S, D], k and v [B, Hkv, S, D]: cuDNN's kernel for half-precision CUDA tensors,
// math otherwise.
torch::Tensor dense_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     double scale) {
#if TOPOTRAIN_HAS_CUDNN_ATTENTION
  if (q.is_cuda() && (q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kFloat16)) {
    const bool needs_grad =
        torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
    // The log-sum-exp is the backward's input; grouped k/v heads go in as they are.
    return std::get<0>(at::_scaled_dot_product_cudnn_attention(q, k, v, /*attn_bias=*/{}, needs_grad,
                                                                /*dropout_p=*/0.0, /*is_causal=*/true,
                                                                /*return_debug_mask=*/false, scale));
  }
#endif
  return dense_causal_math(q, k, v, scale);
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
    case AttentionBackend::dense_grid:
      return "cuDNN on documents of one length (at::_scaled_dot_product_cudnn_attention), else flash varlen";
  }
  return "unknown";
}

AttentionBackend choose_attention_backend(const torch::Device& device, torch::ScalarType dtype, int64_t head_dim) {
  const bool half = dtype == torch::kBFloat16 || dtype == torch::kFloat16;
  if (!device.is_cuda() || !half || head_dim % 8 != 0) return AttentionBackend::math_per_document;
  if (compat::kHasCudnnAttention && head_dim <= 128) return AttentionBackend::dense_grid;
  if (compat::kHasFlashVarlen && head_dim <= 256) return AttentionBackend::flash_varlen;
  return AttentionBackend::math_per_document;
}

DocumentLayout layout_documents(const torch::Tensor& cu_seqlens, int64_t max_seqlen,
                                const std::vector<int64_t>& lengths, AttentionBackend preferred) {
  DocumentLayout layout{cu_seqlens, max_seqlen, preferred, 0};
  if (preferred != AttentionBackend::dense_grid) return layout;
  const bool equal = !lengths.empty() && std::all_of(lengths.begin(), lengths.end(),
                                                     [&](int64_t len) { return len == max_seqlen; });
  if (equal) {
    layout.grid_rows = static_cast<int64_t>(lengths.size());
  } else {
    const bool flash = compat::kHasFlashVarlen && cu_seqlens.is_cuda();
    layout.backend = flash ? AttentionBackend::flash_varlen : AttentionBackend::math_per_document;
  }
  return layout;
}

std::string describe(const DocumentLayout& layout) {
  if (layout.backend != AttentionBackend::dense_grid) return to_string(layout.backend);
  return cat("cuDNN on a ", layout.grid_rows, "x", layout.max_seqlen, " grid");
}

torch::Tensor varlen_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const DocumentLayout& layout, double scale) {
  if (q.dim() != 3 || k.dim() != 3 || k.sizes() != v.sizes() || q.size(1) % k.size(1) != 0) {
    throw std::invalid_argument(cat("varlen_causal_attention: expected q [T, Hq, D], k/v [T, Hkv, D] with Hq a "
                                    "multiple of Hkv, got q ",
                                    q.sizes(), ", k ", k.sizes(), ", v ", v.sizes()));
  }
  switch (layout.backend) {
    case AttentionBackend::math_per_document:
      return math_attention(q, k, v, layout.cu_seqlens, scale);
    case AttentionBackend::flash_varlen:
#if TOPOTRAIN_HAS_FLASH_VARLEN
      return flash_attention(q, k, v, layout.cu_seqlens, layout.max_seqlen, scale);
#else
      throw std::runtime_error("varlen_causal_attention: this build has no flash varlen kernel (needs CUDA LibTorch >= 2.5)");
#endif
    case AttentionBackend::dense_grid: {
      if (layout.grid_rows * layout.max_seqlen != q.size(0)) {
        throw std::invalid_argument(cat("varlen_causal_attention: a grid of ", layout.grid_rows, " documents of ",
                                        layout.max_seqlen, " tokens for ", q.size(0), " tokens"));
      }
      // [T, heads, D] -> [documents, heads, length, D]: views, any strides.
      auto rows = [&](const torch::Tensor& t) {
        return t.unflatten(0, {layout.grid_rows, layout.max_seqlen}).transpose(1, 2);
      };
      return dense_causal_attention(rows(q), rows(k), rows(v), scale).transpose(1, 2).flatten(0, 1);
    }
  }
  throw std::logic_error("varlen_causal_attention: unknown backend");
}

}  // namespace topotrain::model
