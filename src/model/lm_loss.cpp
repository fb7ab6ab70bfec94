#include "topotrain/model/lm_loss.h"

#include <stdexcept>

#include "topotrain/core/error.h"

namespace topotrain::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Invariant: the loss is a scalar, so d(loss)/d(input) is known after the forward; the
// backward only multiplies the saved gradients by the incoming scalar.
class LinearCrossEntropySum : public torch::autograd::Function<LinearCrossEntropySum> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t chunk_rows) {
    const bool want_grad = hidden.requires_grad() || weight.requires_grad();
    const int64_t rows = hidden.size(0);
    auto loss = torch::zeros({}, hidden.options().dtype(torch::kFloat32));
    torch::Tensor grad_hidden, grad_weight;
    if (want_grad) {
      grad_hidden = torch::empty_like(hidden);
      grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat32));
    }
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - begin);
      auto h = hidden.narrow(0, begin, n);
      auto t = targets.narrow(0, begin, n).unsqueeze(1);
      auto logits = torch::matmul(h, weight.t()).to(torch::kFloat32);
      auto lse = logits.logsumexp(-1, /*keepdim=*/true);
      loss += (lse - logits.gather(1, t)).sum();
      if (!want_grad) continue;
      // d(sum CE)/d(logits) = softmax - onehot(target)
      auto dlogits = (logits - lse).exp_();
      dlogits.scatter_add_(1, t, torch::full({n, 1}, -1.0f, dlogits.options()));
      auto d = dlogits.to(hidden.scalar_type());
      grad_hidden.narrow(0, begin, n).copy_(torch::matmul(d, weight));
      grad_weight += torch::matmul(d.t(), h).to(torch::kFloat32);
    }
    if (want_grad) ctx->save_for_backward({grad_hidden, grad_weight.to(weight.scalar_type())});
    return loss;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& scale = grad_outputs[0];
    return {saved[0] * scale.to(saved[0].scalar_type()), saved[1] * scale.to(saved[1].scalar_type()),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor linear_cross_entropy_sum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& targets, int64_t chunk_rows) {
  if (chunk_rows <= 0) throw std::invalid_argument(cat("linear_cross_entropy_sum: chunk_rows must be positive, got ", chunk_rows));
  if (hidden.dim() != 2 || weight.dim() != 2 || hidden.size(1) != weight.size(1) || targets.dim() != 1 ||
      targets.size(0) != hidden.size(0)) {
    throw std::invalid_argument(cat("linear_cross_entropy_sum: expected hidden [N, H], weight [V, H], targets [N]; got ",
                                    hidden.sizes(), ", ", weight.sizes(), ", ", targets.sizes()));
  }
  return LinearCrossEntropySum::apply(hidden, weight, targets, chunk_rows);
}

LmLoss lm_loss(Qwen3CausalLMImpl& model, const torch::Tensor& hidden, const PackedBatch& batch, int64_t chunk_rows) {
  const NextTokenTargets next = next_token_targets(batch);
  LmLoss out;
  out.num_targets = next.rows.size(0);
  out.loss_sum = linear_cross_entropy_sum(hidden.index_select(0, next.rows), model.lm_head_weight(), next.targets,
                                          chunk_rows);
  return out;
}

}  // namespace topotrain::model
