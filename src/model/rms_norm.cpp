#include "topotrain/model/rms_norm.h"

#include "kernel_launch.h"

namespace topotrain::model {
namespace {

// On CUDA at::rms_norm is one fused kernel (forward and backward) that normalises in fp32
// like the unfused ops and rounds once at the end instead of before the weight; unfused, an
// RMSNorm is about ten elementwise and reduction kernels, four calls per layer.
torch::Tensor rms_norm_with_torch_ops(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (x.is_cuda()) return at::rms_norm(x, {x.size(-1)}, weight.to(x.scalar_type()), eps);
  auto xf = x.to(torch::kFloat32);
  auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight.to(x.scalar_type()) * normed.to(x.scalar_type());
}

#ifdef TOPOTRAIN_CUDA
bool kernel_applies(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!own_kernels_apply(x) || x.dim() < 1 || !x.is_contiguous()) return false;
  const int64_t hidden = x.size(-1);
  return hidden % 8 == 0 && hidden <= 8192 && weight.is_cuda() && weight.scalar_type() == torch::kFloat32 &&
         weight.numel() == hidden;
}

// s: the normalised rows as stored (x, or the sum x + residual); grad_sum may be undefined.
torch::autograd::tensor_list backward_of(const torch::Tensor& s, const torch::Tensor& weight,
                                         const torch::Tensor& rstd, const torch::Tensor& grad_y_in,
                                         const torch::Tensor& grad_sum_in) {
  const int64_t hidden = s.size(-1), rows = s.numel() / hidden;
  const auto grad_y = grad_y_in.defined() ? grad_y_in.contiguous() : torch::zeros_like(s);
  const auto grad_sum = grad_sum_in.defined() ? grad_sum_in.contiguous() : torch::Tensor();
  auto grad_x = torch::empty_like(s);
  auto partials = torch::empty({kernels::rms_norm_backward_blocks(rows), hidden}, weight.options());
  check_launch(kernels::rms_norm_backward(s.data_ptr(), weight.data_ptr<float>(), rstd.data_ptr<float>(),
                                          grad_y.data_ptr(), grad_sum.defined() ? grad_sum.data_ptr() : nullptr,
                                          grad_x.data_ptr(), partials.data_ptr<float>(), rows, hidden, stream_of(s)),
               "rms_norm_backward");
  return {grad_x, partials.sum(0)};
}

// Forward of both functions; residual undefined for the plain norm.
torch::autograd::tensor_list forward_of(const torch::Tensor& x, const torch::Tensor& residual,
                                        const torch::Tensor& weight, double eps) {
  const int64_t hidden = x.size(-1), rows = x.numel() / hidden;
  auto sum = residual.defined() ? torch::empty_like(x) : torch::Tensor();
  auto y = torch::empty_like(x);
  auto rstd = torch::empty({rows}, x.options().dtype(torch::kFloat32));
  check_launch(kernels::rms_norm_forward(x.data_ptr(), residual.defined() ? residual.data_ptr() : nullptr,
                                         weight.data_ptr<float>(), sum.defined() ? sum.data_ptr() : nullptr,
                                         y.data_ptr(), rstd.data_ptr<float>(), rows, hidden, static_cast<float>(eps),
                                         stream_of(x)),
               "rms_norm_forward");
  return {sum, y, rstd};
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    auto out = forward_of(x, torch::Tensor(), weight, eps);
    ctx->save_for_backward({x, weight, out[2]});
    return out[1];
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto g = backward_of(saved[0], saved[1], saved[2], grads[0], torch::Tensor());
    return {g[0], g[1], torch::Tensor()};
  }
};

class AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                              const torch::Tensor& residual, const torch::Tensor& weight,
                                              double eps) {
    auto out = forward_of(x, residual.contiguous(), weight, eps);
    ctx->save_for_backward({out[0], weight, out[2]});
    return {out[0], out[1]};
  }

  // grads: {d sum (from the sum's other uses), d normed}; x and residual get the same gradient.
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto g = backward_of(saved[0], saved[1], saved[2], grads[1], grads[0]);
    return {g[0], g[0], g[1], torch::Tensor()};
  }
};
#endif

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
#ifdef TOPOTRAIN_CUDA
  if (kernel_applies(x, weight)) return RmsNormFunction::apply(x, weight, eps);
#endif
  return rms_norm_with_torch_ops(x, weight, eps);
}

NormedSum add_rms_norm(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                       double eps) {
#ifdef TOPOTRAIN_CUDA
  if (kernel_applies(x, weight) && residual.sizes() == x.sizes() && residual.scalar_type() == x.scalar_type()) {
    auto out = AddRmsNormFunction::apply(x, residual, weight, eps);
    return {out[0], out[1]};
  }
#endif
  auto sum = x + residual;
  return {sum, rms_norm_with_torch_ops(sum, weight, eps)};
}

}  // namespace topotrain::model
