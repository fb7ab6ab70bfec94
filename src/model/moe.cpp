#include "topotrain/model/moe.h"

#include <limits>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "kernel_launch.h"
#include "moe_cuda_autograd.h"
#include "topotrain/core/error.h"
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

// The inverse of a permutation by one scatter (inverse[order[i]] = i) instead of a second sort.
torch::Tensor inverse_permutation(const torch::Tensor& order) {
  return torch::empty_like(order).scatter_(0, order, torch::arange(order.size(0), order.options()));
}

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
    const auto inverse = ctx->get_saved_variables()[0];
    return {sum_token_rows(grad, inverse.view({-1, k})), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

 private:
  // grad_x[t] = sum_j grad[rows[t, j]]: one pass on the GPU, a gather and a sum otherwise.
  static torch::Tensor sum_token_rows(const torch::Tensor& grad, const torch::Tensor& rows) {
#ifdef TOPOTRAIN_CUDA
    if (own_kernels_apply(grad) && grad.size(1) % 8 == 0 &&
        rows.size(1) <= kernels::kMaxCombineChoices) {
      const auto g = grad.contiguous();
      auto out = torch::empty({rows.size(0), g.size(1)}, g.options());
      check_launch(kernels::gather_rows_sum(g.data_ptr(), rows.data_ptr<int64_t>(), /*weights=*/nullptr, out.data_ptr(),
                                            rows.size(0), rows.size(1), g.size(1), stream_of(g)),
                   "gather_rows_sum");
      return out;
    }
#endif
    return grad.index_select(0, rows.reshape({-1})).view({rows.size(0), rows.size(1), grad.size(1)}).sum(1);
  }
};

}  // namespace

torch::Tensor combine_expert_outputs(const torch::Tensor& y_rows, const torch::Tensor& rows,
                                     const torch::Tensor& weights) {
  if (y_rows.dim() != 2 || rows.dim() != 2 || rows.numel() != y_rows.size(0) || weights.sizes() != rows.sizes()) {
    throw std::invalid_argument(cat("combine_expert_outputs: expected y_rows [N, H], rows and weights [T, k] with ",
                                    "T * k = N, got y_rows ", y_rows.sizes(), ", rows ", rows.sizes(), ", weights ",
                                    weights.sizes()));
  }
#ifdef TOPOTRAIN_CUDA
  if (own_kernels_apply(y_rows) && y_rows.size(1) % 8 == 0 &&
      rows.size(1) <= kernels::kMaxCombineChoices && rows.scalar_type() == torch::kInt64 &&
      weights.scalar_type() == torch::kFloat32) {
    return combine_expert_outputs_by_kernel(y_rows, rows, weights);
  }
#endif
  // The permutation's inverse, so that the gather's backward is a gather too.
  const auto order = rows.reshape({-1});
  const auto inverse = inverse_permutation(order);
  auto y = permute_rows(y_rows, order, inverse).view({rows.size(0), rows.size(1), y_rows.size(1)});
  return (y * weights.to(y.scalar_type()).unsqueeze(-1)).sum(1);
}

torch::Tensor router_logits(const torch::Tensor& x, const torch::Tensor& weight) {
  if (x.dim() != 2 || weight.dim() != 2 || x.size(1) != weight.size(1) || weight.scalar_type() != torch::kFloat32) {
    throw std::invalid_argument(cat("router_logits: expected x [T, H] and an fp32 weight [E, H], got x ", x.sizes(),
                                    " and ", weight.scalar_type(), " weight ", weight.sizes()));
  }
#ifdef TOPOTRAIN_CUDA
  if (own_kernels_apply(x) && weight.device() == x.device() &&
      kernels::router_gemm_applies(weight.size(0), x.size(1))) {
    return router_logits_by_kernel(x, weight);
  }
#endif
  return torch::matmul(x.to(torch::kFloat32), weight.t());
}

Routing route_tokens(const torch::Tensor& logits, int64_t k, bool renormalize) {
  if (logits.dim() != 2 || logits.scalar_type() != torch::kFloat32 || k < 1 || k > logits.size(1)) {
    throw std::invalid_argument(cat("route_tokens: expected fp32 logits [T, E] and 1 <= k <= E, got ",
                                    logits.scalar_type(), " logits ", logits.sizes(), " and k = ", k));
  }
#ifdef TOPOTRAIN_CUDA
  if (logits.is_cuda() && logits.size(1) <= kernels::kMaxRouterExperts && k <= kernels::kMaxRouterChoices) {
    return route_tokens_by_kernel(logits, k, renormalize);
  }
#endif
  Routing routing;
  routing.probs = torch::softmax(logits, -1);
  std::tie(routing.weights, routing.selected) = routing.probs.topk(k, -1);
  if (renormalize) routing.weights = routing.weights / routing.weights.sum(-1, /*keepdim=*/true);
  // scatter_add instead of bincount, which reads the maximum back to the host.
  const auto flat = routing.selected.reshape({-1});
  routing.counts = torch::zeros({logits.size(1)}, flat.options()).scatter_add_(0, flat, torch::ones_like(flat));
  return routing;
}

std::string to_string(ExpertBackend backend) {
  return backend == ExpertBackend::grouped_mm ? "grouped_mm" : "sorted loop";
}

std::string to_string(ExpertLayout layout) {
  return layout == ExpertLayout::busiest_first ? "busiest first" : "expert order";
}

ExpertBackend choose_expert_backend(const torch::Device& device, torch::ScalarType dtype, const ModelConfig& c) {
  // CUTLASS grouped GEMM wants 16-byte aligned rows in every operand.
  const bool aligned = c.hidden_size % 8 == 0 && c.moe_intermediate_size % 8 == 0;
  if (compat::kCudaBuild && device.is_cuda() && dtype == torch::kBFloat16 && aligned) {
    return ExpertBackend::grouped_mm;
  }
  return ExpertBackend::sorted_loop;
}

void RouterLoad::add(const torch::Tensor& probs, const torch::Tensor& selections) {
  auto sums = probs.sum(0);
  layer_counts.push_back(selections.to(torch::kFloat32));
  probability_sums = probability_sums.defined() ? probability_sums + sums : sums;
  rows += probs.size(0);
}

torch::Tensor load_balancing_loss(const RouterLoad& load, int64_t num_experts) {
  if (load.rows == 0) return torch::zeros({}, torch::kFloat32);
  const double rows = static_cast<double>(load.rows);
  const auto expert_counts = torch::stack(load.layer_counts).sum(0);
  return (expert_counts / rows * (load.probability_sums / rows)).sum() * static_cast<double>(num_experts);
}

torch::Tensor peak_expert_load(const RouterLoad& load) {
  if (load.layer_counts.empty()) return torch::zeros({}, torch::kFloat32);
  // Stacked, so that a forward of L layers adds a few kernels rather than a few per layer. A
  // layer that routed no tokens counts 0 (0 / tiny), not NaN, which would poison the step's sum.
  const auto counts = torch::stack(load.layer_counts);
  return (counts.amax(1) / counts.mean(1).clamp_min(std::numeric_limits<float>::min())).max();
}

ExpertsImpl::ExpertsImpl(int64_t num_experts, int64_t hidden, int64_t intermediate, double init_std) {
  gate_up_proj = register_parameter("gate_up_proj", torch::randn({num_experts, 2 * intermediate, hidden}) * init_std);
  down_proj = register_parameter("down_proj", torch::randn({num_experts, hidden, intermediate}) * init_std);
}

bool ExpertsImpl::compute_copies_current(torch::ScalarType dtype, const torch::Tensor& group_experts) const {
  return gate_up_compute_.current({gate_up_proj}, dtype, group_experts) &&
         down_compute_.current({down_proj}, dtype, group_experts);
}

torch::Tensor ExpertsImpl::forward(const torch::Tensor& x_sorted, const torch::Tensor& counts, ExpertBackend backend,
                                   const torch::Tensor& group_experts) {
  const auto dtype = x_sorted.scalar_type();
  // Weights in group order: weight g is expert group_experts[g]'s.
  auto gate_up = gate_up_compute_.get({gate_up_proj}, dtype, group_experts);
  auto down = down_compute_.get({down_proj}, dtype, group_experts);
  if (backend == ExpertBackend::grouped_mm) {
#ifdef TOPOTRAIN_CUDA
    // offs holds each group's end row; weights go in as [E, in, out] views of the
    // [E, out, in] storage, the column-major operand layout the kernel prefers.
    auto offs = counts.cumsum(0, torch::kInt32);
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

// The dispatch's row groups: each (token, choice) row's sort key (its group), the groups' row
// counts and which expert each group holds (undefined: expert order).
struct SparseMoeBlockImpl::Groups {
  torch::Tensor row_keys, counts, experts;
};

SparseMoeBlockImpl::Groups SparseMoeBlockImpl::groups(const torch::Tensor& x, const Routing& routing) {
  const auto choices = routing.selected.reshape({-1});
  const bool weight_gradients = torch::GradMode::is_enabled() &&
                                (experts->gate_up_proj.requires_grad() || experts->down_proj.requires_grad());
  if (layout_ != ExpertLayout::busiest_first || !weight_gradients ||
      x.scalar_type() == experts->gate_up_proj.scalar_type()) {
    return {choices, routing.counts, {}};
  }
  // A new order only with new compute copies, so that every micro-batch of a step keeps the
  // order its copies were cast in; the loads are the last forward's (the copies are cast
  // before this forward's routing is known). Stable: equal loads keep expert order.
  if (!group_experts_.defined() || !experts->compute_copies_current(x.scalar_type(), group_experts_)) {
    const int64_t num_experts = routing.counts.size(0);
    group_experts_ = previous_counts_.defined()
                         ? std::get<1>(previous_counts_.sort(/*stable=*/true, 0, /*descending=*/true))
                         : torch::arange(num_experts, routing.counts.options().dtype(torch::kInt64));
    // In the choices' dtype: the kernel's uint8 keys (E <= 256) keep the rows' sort one radix pass.
    group_keys_ = inverse_permutation(group_experts_).to(choices.scalar_type());
  }
  previous_counts_ = routing.counts;
  return {group_keys_.index_select(0, choices.to(torch::kInt64)), routing.counts.index_select(0, group_experts_),
          group_experts_};
}

torch::Tensor SparseMoeBlockImpl::forward(const torch::Tensor& x, ExpertBackend backend, RouterLoad* load) {
  const int64_t tokens = x.size(0);
  const auto routing = route_tokens(router_logits(x, gate->weight), top_k_, norm_topk_prob_);

  // Dropless dispatch: every (token, choice) pair becomes one row, rows grouped by expert in the
  // layout's group order. Dispatch and combine are gathers forward and backward (the dispatch's
  // backward sums a token's k rows), so both are deterministic and atomic-free. The sort is
  // stable, so rows of one expert keep token order and the experts' weight gradients sum in the
  // same order every run; on the kernel's uint8 keys it is one radix pass.
  const Groups grouped = groups(x, routing);
  const auto order = std::get<1>(grouped.row_keys.sort(/*stable=*/true, 0, /*descending=*/false));
  auto inverse = inverse_permutation(order);
  if (load != nullptr) load->add(routing.probs, routing.counts);
  auto y_sorted = experts(DispatchRowsFunction::apply(x, order, inverse, top_k_), grouped.counts, backend,
                          grouped.experts);
  // inverse[t * k + j] is the sorted row of token t's choice j: the combine reads the experts'
  // outputs where they are, in expert order.
  return combine_expert_outputs(y_sorted, inverse.view({tokens, top_k_}), routing.weights);
}

}  // namespace topotrain::model
