#include "moe_cuda_autograd.h"

#ifdef TOPOTRAIN_CUDA

#include "kernel_launch.h"

namespace topotrain::model {
namespace {

// logits fp32 [T, E] -> probs, weights (differentiable), selected, counts: route_tokens's kernels.
class RouteFunction : public torch::autograd::Function<RouteFunction> {
 public:
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits_in,
                                              int64_t k, bool renormalize) {
    const auto logits = logits_in.contiguous();
    const int64_t tokens = logits.size(0), experts = logits.size(1);
    auto probs = torch::empty_like(logits);
    auto weights = torch::empty({tokens, k}, logits.options());
    auto selected = torch::empty({tokens, k}, logits.options().dtype(torch::kUInt8));
    auto counts = torch::empty({experts}, logits.options().dtype(torch::kInt32));
    check_launch(kernels::route_forward(logits.data_ptr<float>(), probs.data_ptr<float>(), weights.data_ptr<float>(),
                                        selected.data_ptr<uint8_t>(), counts.data_ptr<int>(), tokens, experts, k,
                                        renormalize, stream_of(logits)),
                 "route_forward");
    ctx->save_for_backward({probs, weights, selected});
    ctx->saved_data["renormalize"] = renormalize;
    ctx->mark_non_differentiable({selected, counts});
    ctx->set_materialize_grads(false);
    return {probs, weights, selected, counts};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &probs = saved[0], &weights = saved[1], &selected = saved[2];
    // An output nothing read back has no gradient: the kernel takes it as zero.
    const auto grad_probs = grads[0].defined() ? grads[0].contiguous() : torch::Tensor();
    const auto grad_weights = grads[1].defined() ? grads[1].contiguous() : torch::Tensor();
    auto grad_logits = torch::empty_like(probs);
    check_launch(kernels::route_backward(probs.data_ptr<float>(), selected.data_ptr<uint8_t>(),
                                         weights.data_ptr<float>(),
                                         grad_weights.defined() ? grad_weights.data_ptr<float>() : nullptr,
                                         grad_probs.defined() ? grad_probs.data_ptr<float>() : nullptr,
                                         grad_logits.data_ptr<float>(), probs.size(0), probs.size(1),
                                         weights.size(1), ctx->saved_data["renormalize"].toBool(),
                                         stream_of(probs)),
                 "route_backward");
    return {grad_logits, torch::Tensor(), torch::Tensor()};
  }
};

// logits fp32 [T, E] = x bf16 [T, H] . weight fp32 [E, H]^T, fp32 arithmetic (router_gemm_kernels.cu).
class RouterLogitsFunction : public torch::autograd::Function<RouterLogitsFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& weight_in) {
    const auto x = x_in.contiguous();
    const auto weight = weight_in.contiguous();
    auto logits = torch::empty({x.size(0), weight.size(0)}, weight.options());
    check_launch(kernels::router_logits_forward(x.data_ptr(), weight.data_ptr<float>(), logits.data_ptr<float>(),
                                                x.size(0), weight.size(0), x.size(1), stream_of(x)),
                 "router_logits_forward");
    ctx->save_for_backward({x, weight});
    return logits;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1];
    const auto grad_logits = grads[0].contiguous();
    const int64_t tokens = x.size(0), experts = weight.size(0), hidden = x.size(1);
    auto grad_x = torch::empty_like(x);
    check_launch(kernels::router_logits_backward_input(grad_logits.data_ptr<float>(), weight.data_ptr<float>(),
                                                       grad_x.data_ptr(), tokens, experts, hidden, stream_of(x)),
                 "router_logits_backward_input");
    auto partials = torch::empty({kernels::router_weight_grad_blocks(tokens), experts, hidden}, weight.options());
    check_launch(kernels::router_logits_backward_weight(x.data_ptr(), grad_logits.data_ptr<float>(),
                                                        partials.data_ptr<float>(), tokens, experts, hidden,
                                                        stream_of(x)),
                 "router_logits_backward_weight");
    return {grad_x, partials.sum(0)};
  }
};

// y_rows [N, H], rows int64 [T, k] a permutation of [0, N) (the caller's invariant: the
// backward writes each row of grad_y_rows once and allocates it uninitialised).
class CombineFunction : public torch::autograd::Function<CombineFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& y_rows_in,
                               const torch::Tensor& rows_in, const torch::Tensor& weights_in) {
    auto y_rows = y_rows_in.contiguous();
    auto rows = rows_in.contiguous();
    auto weights = weights_in.contiguous();
    const int64_t tokens = rows.size(0), k = rows.size(1), hidden = y_rows.size(1);
    auto out = torch::empty({tokens, hidden}, y_rows.options());
    check_launch(kernels::gather_rows_sum(y_rows.data_ptr(), rows.data_ptr<int64_t>(), weights.data_ptr<float>(),
                                          out.data_ptr(), tokens, k, hidden, stream_of(y_rows)),
                 "gather_rows_sum");
    ctx->save_for_backward({y_rows, rows, weights});
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &y_rows = saved[0], &rows = saved[1], &weights = saved[2];
    const auto grad_out = grads[0].contiguous();
    auto grad_y_rows = torch::empty_like(y_rows);
    auto grad_weights = torch::empty_like(weights);
    check_launch(kernels::expert_combine_backward(y_rows.data_ptr(), rows.data_ptr<int64_t>(),
                                                  weights.data_ptr<float>(), grad_out.data_ptr(),
                                                  grad_y_rows.data_ptr(), grad_weights.data_ptr<float>(),
                                                  rows.size(0), rows.size(1), y_rows.size(1), stream_of(y_rows)),
                 "expert_combine_backward");
    return {grad_y_rows, torch::Tensor(), grad_weights};
  }
};

}  // namespace

Routing route_tokens_by_kernel(const torch::Tensor& logits, int64_t k, bool renormalize) {
  const auto out = RouteFunction::apply(logits, k, renormalize);
  return {out[0], out[1], out[2], out[3]};
}

torch::Tensor router_logits_by_kernel(const torch::Tensor& x, const torch::Tensor& weight) {
  return RouterLogitsFunction::apply(x, weight);
}

torch::Tensor combine_expert_outputs_by_kernel(const torch::Tensor& y_rows, const torch::Tensor& rows,
                                               const torch::Tensor& weights) {
  return CombineFunction::apply(y_rows, rows, weights);
}

}  // namespace topotrain::model

#endif  // TOPOTRAIN_CUDA
