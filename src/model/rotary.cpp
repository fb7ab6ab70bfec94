#include "topotrain/model/rotary.h"

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

// Inputs: x (bf16, token-strided), weight (fp32 parameter); cos/sin ride along undifferentiated.
class NormRotaryFunction : public torch::autograd::Function<NormRotaryFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight_in, const torch::Tensor& cos, const torch::Tensor& sin,
                               double eps) {
    const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2);
    auto weight = weight_in.contiguous();
    auto y = torch::empty({tokens, heads, dim}, x.options());
    auto rstd = torch::empty({tokens * heads}, x.options().dtype(torch::kFloat32));
    check_launch(kernels::norm_rotary_forward(x.data_ptr(), x.stride(0), weight.data_ptr<float>(), cos.data_ptr(),
                                              sin.data_ptr(), y.data_ptr(), rstd.data_ptr<float>(), tokens, heads, dim,
                                              static_cast<float>(eps), stream_of(x)),
                 "norm_rotary_forward");
    ctx->save_for_backward({x, weight, cos, sin, rstd});
    return y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &cos = saved[2], &sin = saved[3], &rstd = saved[4];
    const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2);
    const auto grad_y = grads[0].contiguous();
    auto grad_x = torch::empty({tokens, heads, dim}, x.options());
    auto partials = torch::empty({kernels::norm_rotary_backward_blocks(tokens, heads), dim}, weight.options());
    check_launch(kernels::norm_rotary_backward(x.data_ptr(), x.stride(0), weight.data_ptr<float>(), cos.data_ptr(),
                                               sin.data_ptr(), rstd.data_ptr<float>(), grad_y.data_ptr(),
                                               grad_x.data_ptr(), partials.data_ptr<float>(), tokens, heads, dim,
                                               stream_of(x)),
                 "norm_rotary_backward");
    return {grad_x, partials.sum(0), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
#endif

}  // namespace

RotaryTables rotary_tables(const torch::Tensor& positions, int64_t head_dim, double theta, torch::ScalarType dtype) {
  auto exponent = torch::arange(0, head_dim, 2, positions.options().dtype(torch::kInt64)).to(torch::kFloat32) /
                  static_cast<double>(head_dim);
  auto inv_freq = 1.0 / torch::pow(theta, exponent);
  auto freqs = positions.to(torch::kFloat32).unsqueeze(1) * inv_freq.unsqueeze(0);  // [T, D/2]
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
#ifdef TOPOTRAIN_CUDA
  if (norm_rotary_kernel_applies(x, norm_weight, tables)) {
    return NormRotaryFunction::apply(x, norm_weight, tables.cos, tables.sin, eps);
  }
#endif
  return apply_rotary(rms_norm(x, norm_weight, eps), tables);
}

}  // namespace topotrain::model
