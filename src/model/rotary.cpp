#include "topotrain/model/rotary.h"

#include <cmath>

#include "kernel_launch.h"
#include "topotrain/model/layers.h"

namespace topotrain::model {
namespace {

#ifdef TOPOTRAIN_CUDA
bool norm_rotary_kernel_applies(const torch::Tensor& x, const torch::Tensor& weight, const RotaryTables& tables) {
  if (!own_kernels_apply(x) || x.dim() != 3) return false;
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2);
  const bool dim_ok = dim % 64 == 0 && dim <= 256;
  const bool rows_packed = x.stride(2) == 1 && (heads == 1 || x.stride(1) == dim);
  const bool weight_ok = weight.is_cuda() && weight.scalar_type() == torch::kFloat32 && weight.numel() == dim;
  auto table_ok = [&](const torch::Tensor& t) {
    return t.scalar_type() == torch::kBFloat16 && t.is_contiguous() && t.numel() == tokens * dim;
  };
  return dim_ok && rows_packed && weight_ok && table_ok(tables.cos) && table_ok(tables.sin);
}

// One kernel launch each way over `heads` heads of head_dim `dim` that start `column` values
// into each token's row of `rows` (bf16, token stride rows.stride(0)).
struct Rotated {
  torch::Tensor y, rstd;  // y contiguous [T, heads, dim]; rstd fp32 [T * heads]
};

const void* at_column(const torch::Tensor& rows, int64_t column) {
  return static_cast<const at::BFloat16*>(rows.data_ptr()) + column;
}

Rotated rotate_forward(const torch::Tensor& rows, int64_t column, int64_t heads, int64_t dim,
                       const torch::Tensor& weight, const torch::Tensor& cos, const torch::Tensor& sin, double eps) {
  const int64_t tokens = rows.size(0);
  Rotated out{torch::empty({tokens, heads, dim}, rows.options()),
              torch::empty({tokens * heads}, rows.options().dtype(torch::kFloat32))};
  check_launch(kernels::norm_rotary_forward(at_column(rows, column), rows.stride(0), weight.data_ptr<float>(),
                                            cos.data_ptr(), sin.data_ptr(), out.y.data_ptr(),
                                            out.rstd.data_ptr<float>(), tokens, heads, dim, static_cast<float>(eps),
                                            stream_of(rows)),
               "norm_rotary_forward");
  return out;
}

// Writes dx into `grad_rows` (same layout as rows, its own token stride) at `column`; returns
// the weight gradient.
torch::Tensor rotate_backward(const torch::Tensor& rows, int64_t column, int64_t heads, int64_t dim,
                              const torch::Tensor& weight, const torch::Tensor& cos, const torch::Tensor& sin,
                              const torch::Tensor& rstd, const torch::Tensor& grad_y_in, torch::Tensor& grad_rows) {
  const int64_t tokens = rows.size(0);
  const auto grad_y = grad_y_in.contiguous();
  auto partials = torch::empty({kernels::norm_rotary_backward_blocks(tokens, heads), dim}, weight.options());
  check_launch(kernels::norm_rotary_backward(at_column(rows, column), rows.stride(0), weight.data_ptr<float>(),
                                             cos.data_ptr(), sin.data_ptr(), rstd.data_ptr<float>(), grad_y.data_ptr(),
                                             static_cast<at::BFloat16*>(grad_rows.data_ptr()) + column,
                                             grad_rows.stride(0), partials.data_ptr<float>(), tokens, heads, dim,
                                             stream_of(rows)),
               "norm_rotary_backward");
  return partials.sum(0);
}

// Inputs: x (bf16, token-strided), weight (fp32 parameter); cos/sin ride along undifferentiated.
class NormRotaryFunction : public torch::autograd::Function<NormRotaryFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight_in, const torch::Tensor& cos, const torch::Tensor& sin,
                               double eps) {
    auto weight = weight_in.contiguous();
    auto out = rotate_forward(x, 0, x.size(1), x.size(2), weight, cos, sin, eps);
    ctx->save_for_backward({x, weight, cos, sin, out.rstd});
    return out.y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1];
    auto grad_x = torch::empty(x.sizes(), x.options());
    auto grad_weight = rotate_backward(x, 0, x.size(1), x.size(2), weight, saved[2], saved[3], saved[4], grads[0],
                                       grad_x);
    return {grad_x, grad_weight, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Inputs: the fused projection [T, (Hq + 2 Hkv) * D] and the q/k norm weights. Outputs q and k
// rotated, and v as a view of the input. The backward fills one gradient buffer for the whole
// projection: split's backward would concatenate dq, dk and dv into it in another pass.
class RotatedHeadsFunction : public torch::autograd::Function<RotatedHeadsFunction> {
 public:
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& fused,
                                              const torch::Tensor& q_weight_in, const torch::Tensor& k_weight_in,
                                              const torch::Tensor& cos, const torch::Tensor& sin, double eps,
                                              int64_t q_heads, int64_t kv_heads) {
    const int64_t tokens = fused.size(0), dim = fused.size(1) / (q_heads + 2 * kv_heads);
    auto q_weight = q_weight_in.contiguous(), k_weight = k_weight_in.contiguous();
    auto q = rotate_forward(fused, 0, q_heads, dim, q_weight, cos, sin, eps);
    auto k = rotate_forward(fused, q_heads * dim, kv_heads, dim, k_weight, cos, sin, eps);
    auto v = fused.narrow(1, (q_heads + kv_heads) * dim, kv_heads * dim).view({tokens, kv_heads, dim});
    ctx->save_for_backward({fused, q_weight, k_weight, cos, sin, q.rstd, k.rstd});
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined: no zero tensors to read
    ctx->saved_data["q_heads"] = q_heads;
    ctx->saved_data["kv_heads"] = kv_heads;
    return {q.y, k.y, v};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &fused = saved[0], &cos = saved[3], &sin = saved[4];
    const int64_t q_heads = ctx->saved_data["q_heads"].toInt(), kv_heads = ctx->saved_data["kv_heads"].toInt();
    const int64_t dim = fused.size(1) / (q_heads + 2 * kv_heads);
    auto grad_fused = torch::empty(fused.sizes(), fused.options());
    // An output nobody used has no gradient: its columns get zeros.
    auto heads_backward = [&](int64_t column, int64_t heads, const torch::Tensor& weight, const torch::Tensor& rstd,
                              const torch::Tensor& grad) {
      if (grad.defined()) return rotate_backward(fused, column, heads, dim, weight, cos, sin, rstd, grad, grad_fused);
      grad_fused.narrow(1, column, heads * dim).zero_();
      return torch::zeros_like(weight);
    };
    auto grad_q_weight = heads_backward(0, q_heads, saved[1], saved[5], grads[0]);
    auto grad_k_weight = heads_backward(q_heads * dim, kv_heads, saved[2], saved[6], grads[1]);
    auto grad_v = grad_fused.narrow(1, (q_heads + kv_heads) * dim, kv_heads * dim);
    if (grads[2].defined()) {
      grad_v.copy_(grads[2].reshape({fused.size(0), kv_heads * dim}));
    } else {
      grad_v.zero_();
    }
    return {grad_fused, grad_q_weight, grad_k_weight, torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};
#endif

}  // namespace

torch::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const std::optional<Llama3RopeScaling>& scaling,
                                       const torch::Device& device) {
  const auto exponent = torch::arange(0, head_dim, 2, torch::TensorOptions(torch::kInt64).device(device))
                            .to(torch::kFloat32) /
                        static_cast<double>(head_dim);
  auto inv_freq = 1.0 / torch::pow(theta, exponent);
  if (!scaling) return inv_freq;
  const double factor = scaling->factor, low = scaling->low_freq_factor, high = scaling->high_freq_factor;
  const auto context = static_cast<double>(scaling->original_max_position_embeddings);
  const double low_freq_wavelen = context / low, high_freq_wavelen = context / high;
  const auto wavelen = 2 * M_PI / inv_freq;
  // Long wavelengths stretched by the factor, short ones kept, the band between blended.
  auto scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
  const auto smooth = (context / wavelen - low) / (high - low);
  const auto smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  const auto medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return torch::where(medium, smoothed, scaled);
}

RotaryTables rotary_tables(const torch::Tensor& positions, const ModelConfig& config, torch::ScalarType dtype) {
  return rotary_tables(
      positions, rope_inverse_frequencies(config.head_dim, config.rope_theta, config.rope_scaling, positions.device()),
      dtype);
}

RotaryTables rotary_tables(const torch::Tensor& positions, const torch::Tensor& inverse_frequencies,
                           torch::ScalarType dtype) {
  auto freqs = positions.to(torch::kFloat32).unsqueeze(1) * inverse_frequencies.unsqueeze(0);  // [T, D/2]
  auto angles = torch::cat({freqs, freqs}, -1).unsqueeze(1);                        // [T, 1, D]
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& tables) {
  const int64_t half = x.size(-1) / 2;
  auto rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * tables.cos + rotated * tables.sin;
}

torch::Tensor norm_rotary(const torch::Tensor& x, const torch::Tensor& norm_weight, double eps,
                          const RotaryTables& tables) {
  if (!norm_weight.defined()) return apply_rotary(x, tables);
#ifdef TOPOTRAIN_CUDA
  if (norm_rotary_kernel_applies(x, norm_weight, tables)) {
    return NormRotaryFunction::apply(x, norm_weight, tables.cos, tables.sin, eps);
  }
#endif
  return apply_rotary(rms_norm(x, norm_weight, eps), tables);
}

RotatedHeads rotated_heads(const torch::Tensor& fused, int64_t q_heads, int64_t kv_heads,
                           const torch::Tensor& q_norm_weight, const torch::Tensor& k_norm_weight, double eps,
                           const RotaryTables& tables) {
  const int64_t tokens = fused.size(0), dim = fused.size(1) / (q_heads + 2 * kv_heads);
  auto heads_at = [&](const torch::Tensor& columns, int64_t heads) { return columns.view({tokens, heads, dim}); };
#ifdef TOPOTRAIN_CUDA
  // q's and k's views serve the check only: taken on a detached alias, they add no autograd node.
  const auto alias = fused.detach();
  if (alias.is_contiguous() && q_norm_weight.defined() && k_norm_weight.defined() &&
      norm_rotary_kernel_applies(heads_at(alias.narrow(1, 0, q_heads * dim), q_heads), q_norm_weight, tables) &&
      norm_rotary_kernel_applies(heads_at(alias.narrow(1, q_heads * dim, kv_heads * dim), kv_heads), k_norm_weight,
                                 tables)) {
    auto out = RotatedHeadsFunction::apply(fused, q_norm_weight, k_norm_weight, tables.cos, tables.sin, eps, q_heads,
                                           kv_heads);
    return {out[0], out[1], out[2]};
  }
#endif
  auto parts = fused.split_with_sizes({q_heads * dim, kv_heads * dim, kv_heads * dim}, 1);
  return {norm_rotary(heads_at(parts[0], q_heads), q_norm_weight, eps, tables),
          norm_rotary(heads_at(parts[1], kv_heads), k_norm_weight, eps, tables), heads_at(parts[2], kv_heads)};
}

}  // namespace topotrain::model
