#include "topotrain/model/swiglu.h"

#include "kernel_launch.h"

namespace topotrain::model {
namespace {

torch::Tensor swiglu_with_torch_ops(const torch::Tensor& gate_up) {
  const int64_t inner = gate_up.size(-1) / 2;
  return torch::silu(gate_up.narrow(-1, 0, inner)) * gate_up.narrow(-1, inner, inner);
}

#ifdef TOPOTRAIN_CUDA
class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate_up_in) {
    auto gate_up = gate_up_in.contiguous();
    const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
    auto out = torch::empty({rows, inner}, gate_up.options());
    check_launch(kernels::swiglu_forward(gate_up.data_ptr(), out.data_ptr(), rows, inner, stream_of(gate_up)),
                 "swiglu_forward");
    ctx->save_for_backward({gate_up});
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto gate_up = ctx->get_saved_variables()[0];
    const auto grad_out = grads[0].contiguous();
    auto grad = torch::empty_like(gate_up);
    check_launch(kernels::swiglu_backward(gate_up.data_ptr(), grad_out.data_ptr(), grad.data_ptr(), gate_up.size(0),
                                          gate_up.size(1) / 2, stream_of(gate_up)),
                 "swiglu_backward");
    return {grad};
  }
};
#endif

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate_up) {
#ifdef TOPOTRAIN_CUDA
  if (own_kernels_apply(gate_up) && gate_up.dim() == 2 && gate_up.size(1) % 16 == 0) {
    return SwigluFunction::apply(gate_up);
  }
#endif
  return swiglu_with_torch_ops(gate_up);
}

}  // namespace topotrain::model
