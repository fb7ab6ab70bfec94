#include "topotrain/model/moe.h"

#include <stdexcept>
#include <vector>

#include "kernel_launch.h"
#include "topotrain/model/swiglu.h"
#include "topotrain/torch_compat.h"

namespace topotrain::model {
namespace {

// rows[i] = x[order[i]] for a permutation `order` with inverse `inverse`. Its backward is the
// inverse gather; index_select's would scatter-add (atomics, nondeterministic order), which
// a permutation never needs.
class PermuteRowsFunction : public torch::autograd::Function<PermuteRowsFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& order, const torch::Tensor& inverse) {
    ctx->save_for_backward({inverse});
    return x.index_select(0, order);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    return {grads[0].index_select(0, ctx->get_saved_variables()[0]), torch::Tensor(), torch::Tensor()};
  }
};

torch::Tensor permute_rows(const torch::Tensor& x, const torch::Tensor& order, const torch::Tensor& inverse) {
  return PermuteRowsFunction::apply(x, order, inverse);
}

// rows[i] = x[order[i] / k]: the k copies of every token, already in expert order, by one
// gather (copying first and then permuting the copies passed over the rows twice). The
// backward gathers each token's k rows back through `inverse` and sums them.
class DispatchRowsFunction : public torch::autograd::Function<DispatchRowsFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& order, const torch::Tensor& inverse, int64_t k) {
    ctx->save_for_backward({inverse});
    ctx->saved_data["k"] = k;
    return x.index_select(0, order.div(k, "floor"));
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto& grad = grads[0];
    const int64_t k = ctx->saved_data["k"].toInt();
    auto per_token = grad.index_select(0, ctx->get_saved_variables()[0]).view({-1, k, grad.size(1)});
    return {per_token.sum(1), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

#ifdef TOPOTRAIN_CUDA
class CombineFunction : public torch::autograd::Function<CombineFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& y_in,
                               const torch::Tensor& weights_in) {
    auto y = y_in.contiguous();
    auto weights = weights_in.contiguous();
    const int64_t tokens = y.size(0), k = y.size(1), hidden = y.size(2);
    auto out = torch::empty({tokens, hidden}, y.options());
    check_launch(kernels::expert_combine_forward(y.data_ptr(), weights.data_ptr<float>(), out.data_ptr(), tokens, k,
                                                 hidden, stream_of(y)),
                 "expert_combine_forward");
    ctx->save_for_backward({y, weights});
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &y = saved[0], &weights = saved[1];
    const auto grad_out = grads[0].contiguous();
    auto grad_y = torch::empty_like(y);
    auto grad_weights = torch::empty_like(weights);
    check_launch(kernels::expert_combine_backward(y.data_ptr(), weights.data_ptr<float>(), grad_out.data_ptr(),
                                                  grad_y.data_ptr(), grad_weights.data_ptr<float>(), y.size(0),
                                                  y.size(1), y.size(2), stream_of(y)),
                 "expert_combine_backward");
    return {grad_y, grad_weights};
  }
};
#endif

}  // namespace

torch::Tensor combine_expert_outputs(const torch::Tensor& y, const torch::Tensor& weights) {
#ifdef TOPOTRAIN_CUDA
  if (own_kernels_apply(y) && y.dim() == 3 && y.size(2) % 8 == 0 && y.size(1) <= kernels::kMaxCombineChoices &&
      weights.scalar_type() == torch::kFloat32) {
    return CombineFunction::apply(y, weights);
  }
#endif
  return (y * weights.to(y.scalar_type()).unsqueeze(-1)).sum(1);
}

std::string to_string(ExpertBackend backend) {
  return backend == ExpertBackend::grouped_mm ? "grouped_mm" : "sorted loop";
}

ExpertBackend choose_expert_backend(const torch::Device& device, torch::ScalarType dtype, const ModelConfig& c) {
  // CUTLASS grouped GEMM wants 16-byte aligned rows in every operand.
  const bool aligned = c.hidden_size % 8 == 0 && c.moe_intermediate_size % 8 == 0;
  if (compat::kHasGroupedMm && device.is_cuda() && dtype == torch::kBFloat16 && aligned) {
    return ExpertBackend::grouped_mm;
  }
  return ExpertBackend::sorted_loop;
}

void RouterLoad::add(const torch::Tensor& probs, const torch::Tensor& selected) {
  auto flat = selected.reshape({-1});
  auto counts = torch::zeros({probs.size(1)}, probs.options())
                    .index_add_(0, flat, torch::ones({flat.size(0)}, probs.options()));
  auto sums = probs.sum(0);
  expert_counts = expert_counts.defined() ? expert_counts + counts : counts;
  probability_sums = probability_sums.defined() ? probability_sums + sums : sums;
  rows += probs.size(0);
}

torch::Tensor load_balancing_loss(const RouterLoad& load, int64_t num_experts) {
  if (load.rows == 0) return torch::zeros({}, torch::kFloat32);
  const double rows = static_cast<double>(load.rows);
  return (load.expert_counts / rows * (load.probability_sums / rows)).sum() * static_cast<double>(num_experts);
}

ExpertsImpl::ExpertsImpl(int64_t num_experts, int64_t hidden, int64_t intermediate, double init_std) {
  gate_up_proj = register_parameter("gate_up_proj", torch::randn({num_experts, 2 * intermediate, hidden}) * init_std);
  down_proj = register_parameter("down_proj", torch::randn({num_experts, hidden, intermediate}) * init_std);
}

torch::Tensor ExpertsImpl::forward(const torch::Tensor& x_sorted, const torch::Tensor& counts, ExpertBackend backend) {
  const auto dtype = x_sorted.scalar_type();
  auto gate_up = gate_up_compute_.get({gate_up_proj}, dtype);
  auto down = down_compute_.get({down_proj}, dtype);
  if (backend == ExpertBackend::grouped_mm) {
#if TOPOTRAIN_HAS_GROUPED_MM
    // offs holds each group's end row; weights go in as [E, in, out] views of the
    // [E, out, in] storage, the column-major operand layout the kernel prefers.
    auto offs = counts.cumsum(0).to(torch::kInt32);
    auto hidden = swiglu(at::_grouped_mm(x_sorted, gate_up.transpose(1, 2), offs));
    return at::_grouped_mm(hidden, down.transpose(1, 2), offs);
#else
    throw std::runtime_error("experts: this build has no at::_grouped_mm (needs CUDA LibTorch >= 2.8)");
#endif
  }
  const auto host_counts = counts.to(torch::kCPU).to(torch::kInt64);
  const auto* n = host_counts.data_ptr<int64_t>();
  std::vector<torch::Tensor> outputs;
  int64_t begin = 0;
  for (int64_t e = 0; e < host_counts.size(0); ++e) {
    if (n[e] == 0) continue;
    auto rows = x_sorted.narrow(0, begin, n[e]);
    outputs.push_back(torch::matmul(swiglu(torch::matmul(rows, gate_up[e].t())), down[e].t()));
    begin += n[e];
  }
  if (outputs.empty()) return torch::zeros({0, down.size(1)}, x_sorted.options());
  return torch::cat(outputs, 0);
}

SparseMoeBlockImpl::SparseMoeBlockImpl(const ModelConfig& c)
    : top_k_(c.num_experts_per_tok), norm_topk_prob_(c.norm_topk_prob) {
  gate = register_module("gate", Projection(c.hidden_size, c.num_experts, c.initializer_range));
  experts = register_module(
      "experts", Experts(c.num_experts, c.hidden_size, c.moe_intermediate_size, c.initializer_range));
}

torch::Tensor SparseMoeBlockImpl::forward(const torch::Tensor& x, ExpertBackend backend, RouterLoad* load) {
  const int64_t tokens = x.size(0), hidden = x.size(1), num_experts = gate->weight.size(0);
  // The router runs in fp32 even under bf16 compute: bf16 rounding of near-tied logits
  // flips top-k choices, and a flipped choice sends the token through another expert.
  auto router_logits = gate(x.to(torch::kFloat32));
  auto probs = torch::softmax(router_logits, -1, torch::kFloat32);
  auto [weights, selected] = probs.topk(top_k_, -1);
  if (norm_topk_prob_) weights = weights / weights.sum(-1, /*keepdim=*/true);
  if (load != nullptr) load->add(probs, selected);

  // Dropless dispatch: every (token, choice) pair becomes one row, rows sorted by expert.
  // Dispatch and combine are gathers forward and backward (the dispatch's backward sums a
  // token's k rows), so both are deterministic and atomic-free.
  auto flat = selected.reshape({-1});
  auto order = flat.argsort();
  // The inverse of a permutation by one scatter (inverse[order[i]] = i) instead of a second sort.
  auto inverse = torch::empty_like(order).scatter_(0, order, torch::arange(order.size(0), order.options()));
  // scatter_add instead of bincount, which reads the maximum back to the host.
  auto counts = torch::zeros({num_experts}, flat.options()).scatter_add_(0, flat, torch::ones_like(flat));
  auto y_sorted = experts(DispatchRowsFunction::apply(x, order, inverse, top_k_), counts, backend);
  auto y = permute_rows(y_sorted, inverse, order).view({tokens, top_k_, hidden});
  return combine_expert_outputs(y, weights);
}

}  // namespace topotrain::model
