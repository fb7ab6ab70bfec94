#include "topotrain/model/attention.h"

#include <algorithm>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/model/attention_math.h"
#include "topotrain/torch_compat.h"

namespace topotrain::model {
namespace {

// Dense causal attention in plain ops: q [B, Hq, S, D], k and v [B, Hkv, S, D].
torch::Tensor dense_causal_math(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                double scale) {
  return attention_math(q, k, v, future_keys(q.size(2), k.size(2), q.device()), scale);
}

torch::Tensor per_document_math(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
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

// cuDNN's dense kernel takes half-precision CUDA tensors; the math path everything else.
[[maybe_unused]] bool cudnn_applies(const torch::Tensor& q) {
  return q.is_cuda() && (q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kFloat16);
}

// q [B, Hq, S, D], k and v [B, Hkv, S, D]: cuDNN's kernel where it applies, math otherwise.
torch::Tensor dense_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     double scale) {
#ifdef TOPOTRAIN_CUDA
  if (cudnn_applies(q)) {
    // The log-sum-exp is the backward's input; grouped k/v heads go in as they are.
    return std::get<0>(at::_scaled_dot_product_cudnn_attention(q, k, v, /*attn_bias=*/{},
                                                                attention_gradient_follows(q, k, v),
                                                                /*dropout_p=*/0.0, /*is_causal=*/true,
                                                                /*return_debug_mask=*/false, scale));
  }
#endif
  return dense_causal_math(q, k, v, scale);
}

// A document window of a packed [T, heads, D] tensor as [1, heads, rows, D]: a view where the
// batch holds the window's rows, else a copy of what it holds, zero after (zeros keep the rows
// that no query of the document sees finite: a masked score still multiplies its value row).
// The copy keeps the batch's strides, so that cuDNN runs it with the plan of the other windows
// of its size.
torch::Tensor window_of(const torch::Tensor& packed, const DocumentWindow& window) {
  const int64_t held = std::min(window.rows, packed.size(0) - window.begin);
  auto rows = packed.narrow(0, window.begin, held);
  if (held < window.rows) {
    auto padded = torch::empty_strided({window.rows, packed.size(1), packed.size(2)}, packed.strides(),
                                       packed.options());
    padded.zero_();
    padded.narrow(0, 0, held).copy_(rows);
    rows = padded;
  }
  return rows.unsqueeze(0).transpose(1, 2);
}

// [1, heads, rows, D] -> the document's [length, heads, D].
torch::Tensor document_rows(const torch::Tensor& window_tensor, int64_t length) {
  return window_tensor.select(0, 0).narrow(1, 0, length).transpose(0, 1);
}

// One window's forward: cuDNN's output, log-sum-exp and dropout state; the math path gives
// only the output (its backward recomputes).
struct WindowForward {
  torch::Tensor out, logsumexp, philox_seed, philox_offset;
};

// needs_grad: whether a backward follows (cuDNN then writes the log-sum-exp it reads).
WindowForward window_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                             [[maybe_unused]] bool needs_grad) {
#ifdef TOPOTRAIN_CUDA
  if (cudnn_applies(q)) {
    auto result = at::_scaled_dot_product_cudnn_attention(q, k, v, /*attn_bias=*/{}, /*compute_log_sumexp=*/needs_grad,
                                                          /*dropout_p=*/0.0, /*is_causal=*/true,
                                                          /*return_debug_mask=*/false, scale);
    return {std::get<0>(result), std::get<1>(result), std::get<6>(result), std::get<7>(result)};
  }
#endif
  return {dense_causal_math(q, k, v, scale), {}, {}, {}};
}

torch::autograd::tensor_list window_backward(const torch::Tensor& grad_out, const torch::Tensor& q,
                                             const torch::Tensor& k, const torch::Tensor& v,
                                             const WindowForward& forward, double scale) {
#ifdef TOPOTRAIN_CUDA
  if (cudnn_applies(q)) {
    auto grads = at::_scaled_dot_product_cudnn_attention_backward(
        grad_out, q, k, v, forward.out, forward.logsumexp, forward.philox_seed, forward.philox_offset,
        /*attn_bias=*/{}, /*cum_seq_q=*/{}, /*cum_seq_k=*/{}, q.size(2), k.size(2), /*dropout_p=*/0.0,
        /*is_causal=*/true, scale);
    return {std::get<0>(grads), std::get<1>(grads), std::get<2>(grads)};
  }
#endif
  torch::AutoGradMode enable(true);
  auto qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(), vg = v.detach().requires_grad_();
  return torch::autograd::grad({dense_causal_math(qg, kg, vg, scale)}, {qg, kg, vg}, {grad_out});
}

// Inputs q [T, Hq, D], k and v [T, Hkv, D]; the windows, scale and needs_grad ride along.
// Autograd through the windows' views would give each document a zero-filled gradient of the
// whole batch; here each result (the output; dq, dk, dv) is one concatenation of the
// documents' rows of every window.
class DocumentWindowsFunction : public torch::autograd::Function<DocumentWindowsFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v,
                               const std::vector<DocumentWindow>& windows, double scale, bool needs_grad) {
    // 6 per window: its q, k, v, log-sum-exp and dropout state; then the output. The windows'
    // own outputs are not kept: the backward reads the output's window instead, equal in the
    // document's rows, and the rows past them (another document's, or zeros) meet a zero output
    // gradient, so cuDNN's rowsum(dO * O) is zero there whatever O holds.
    torch::autograd::variable_list saved;
    std::vector<torch::Tensor> documents;
    std::vector<int64_t> bounds;
    for (const auto& window : windows) {
      const auto qw = window_of(q, window), kw = window_of(k, window), vw = window_of(v, window);
      auto forward = window_forward(qw, kw, vw, scale, needs_grad);
      documents.push_back(document_rows(forward.out, window.length));
      saved.insert(saved.end(), {qw, kw, vw, forward.logsumexp, forward.philox_seed, forward.philox_offset});
      bounds.insert(bounds.end(), {window.begin, window.length, window.rows});
    }
    auto out = torch::cat(documents, 0);
    saved.push_back(out);
    ctx->save_for_backward(saved);
    ctx->saved_data["windows"] = bounds;
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto bounds = ctx->saved_data["windows"].toIntVector();
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto& grad = grads[0];
    std::vector<DocumentWindow> windows;
    int64_t longest_tail = 0;
    for (size_t w = 0; w < bounds.size(); w += 3) {
      windows.push_back({bounds[w], bounds[w + 1], bounds[w + 2]});
      longest_tail = std::max(longest_tail, bounds[w + 2] - bounds[w + 1]);
    }
    // Every window's output gradient in one buffer: the document's rows, then zeros for the
    // rows past it, whose queries saw the document's keys.
    const auto zeros = torch::zeros({longest_tail, grad.size(1), grad.size(2)}, grad.options());
    std::vector<torch::Tensor> pieces;
    for (const auto& window : windows) {
      pieces.push_back(grad.narrow(0, window.begin, window.length));
      if (window.rows > window.length) pieces.push_back(zeros.narrow(0, 0, window.rows - window.length));
    }
    const auto grad_windows = torch::cat(pieces, 0);
    const auto& out = saved.back();
    std::vector<torch::Tensor> dq, dk, dv;
    int64_t row = 0;
    for (size_t w = 0; w < windows.size(); ++w) {
      const auto& window = windows[w];
      const auto* kept = &saved[6 * w];
      const auto window_grads =
          window_backward(grad_windows.narrow(0, row, window.rows).unsqueeze(0).transpose(1, 2), kept[0], kept[1],
                          kept[2], WindowForward{window_of(out, window), kept[3], kept[4], kept[5]}, scale);
      row += window.rows;
      dq.push_back(document_rows(window_grads[0], window.length));
      dk.push_back(document_rows(window_grads[1], window.length));
      dv.push_back(document_rows(window_grads[2], window.length));
    }
    return {torch::cat(dq, 0), torch::cat(dk, 0), torch::cat(dv, 0), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

#ifdef TOPOTRAIN_CUDA
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

bool attention_gradient_follows(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

std::string to_string(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::math_per_document:
      return "math (per document)";
    case AttentionBackend::flash_varlen:
      return "flash varlen (at::_flash_attention_forward)";
    case AttentionBackend::dense_grid:
      return "cuDNN (at::_scaled_dot_product_cudnn_attention) on documents of one length or, once per document, "
             "of several lengths all >= " + std::to_string(kMinWindowLength) + " tokens and >= " +
             std::to_string(kMinWindowMeanLength) + " on average; else flash varlen";
    case AttentionBackend::document_windows:
      return "cuDNN once per document over a window of the packed batch";
  }
  return "unknown";
}

AttentionBackend choose_attention_backend(const torch::Device& device, torch::ScalarType dtype, int64_t head_dim) {
  const bool half = dtype == torch::kBFloat16 || dtype == torch::kFloat16;
  if (!device.is_cuda() || !half || head_dim % 8 != 0) return AttentionBackend::math_per_document;
  if (compat::kCudaBuild && head_dim <= 128) return AttentionBackend::dense_grid;
  if (compat::kCudaBuild && head_dim <= 256) return AttentionBackend::flash_varlen;
  return AttentionBackend::math_per_document;
}

int64_t window_rows(int64_t length) {
  int64_t power = 1;
  while (power < length) power *= 2;
  const int64_t step = std::max<int64_t>(64, power / 16);
  return (length + step - 1) / step * step;
}

std::vector<DocumentWindow> document_windows(const std::vector<int64_t>& lengths) {
  std::vector<DocumentWindow> windows;
  windows.reserve(lengths.size());
  int64_t begin = 0;
  for (int64_t length : lengths) {
    windows.push_back({begin, length, window_rows(length)});
    begin += length;
  }
  return windows;
}

bool runs_in_windows(const std::vector<int64_t>& lengths) {
  if (lengths.empty() || *std::min_element(lengths.begin(), lengths.end()) < kMinWindowLength) return false;
  int64_t tokens = 0;
  for (int64_t length : lengths) tokens += length;
  return tokens >= kMinWindowMeanLength * static_cast<int64_t>(lengths.size());
}

DocumentLayout layout_documents(const torch::Tensor& cu_seqlens, int64_t max_seqlen,
                                const std::vector<int64_t>& lengths, AttentionBackend preferred) {
  DocumentLayout layout{cu_seqlens, max_seqlen, preferred, 0, {}};
  if (preferred != AttentionBackend::dense_grid) return layout;
  const bool equal = !lengths.empty() && std::all_of(lengths.begin(), lengths.end(),
                                                     [&](int64_t len) { return len == max_seqlen; });
  if (equal) {
    layout.grid_rows = static_cast<int64_t>(lengths.size());
  } else if (runs_in_windows(lengths)) {
    layout.backend = AttentionBackend::document_windows;
    layout.windows = document_windows(lengths);
  } else {
    const bool flash = compat::kCudaBuild && cu_seqlens.is_cuda();
    layout.backend = flash ? AttentionBackend::flash_varlen : AttentionBackend::math_per_document;
  }
  return layout;
}

std::string describe(const DocumentLayout& layout) {
  if (layout.backend == AttentionBackend::dense_grid) {
    return cat("cuDNN on a ", layout.grid_rows, "x", layout.max_seqlen, " grid");
  }
  if (layout.backend == AttentionBackend::document_windows) {
    return cat("cuDNN on ", layout.windows.size(), " document windows");
  }
  return to_string(layout.backend);
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
      return per_document_math(q, k, v, layout.cu_seqlens, scale);
    case AttentionBackend::flash_varlen:
#ifdef TOPOTRAIN_CUDA
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
    case AttentionBackend::document_windows: {
      const int64_t end = layout.windows.empty() ? 0 : layout.windows.back().begin + layout.windows.back().length;
      if (end != q.size(0)) {
        throw std::invalid_argument(cat("varlen_causal_attention: document windows ending at token ", end, " for ",
                                        q.size(0), " tokens"));
      }
      return DocumentWindowsFunction::apply(q, k, v, layout.windows, scale, attention_gradient_follows(q, k, v));
    }
  }
  throw std::logic_error("varlen_causal_attention: unknown backend");
}

torch::Tensor cached_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      double scale) {
  if (q.dim() != 3 || k.dim() != 3 || k.sizes() != v.sizes() || q.size(0) > k.size(0)) {
    throw std::invalid_argument(cat("cached_causal_attention: expected q [n, Hq, D] of the last n of k/v [L, Hkv, D], "
                                    "got q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes()));
  }
  auto heads_first = [](const torch::Tensor& t) { return t.transpose(0, 1); };
  return attention_math(heads_first(q), heads_first(k), heads_first(v), future_keys(q.size(0), k.size(0), q.device()),
                        scale)
      .transpose(0, 1);
}

}  // namespace topotrain::model
