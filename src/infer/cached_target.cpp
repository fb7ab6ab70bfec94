#include "topotrain/infer/cached_target.h"

#include <utility>

namespace topotrain::infer {

CachedTarget::CachedTarget(model::CausalLMImpl& model, std::vector<int64_t> taps)
    : model_(model),
      taps_(std::move(taps)),
      cache_(model.config().num_hidden_layers, model.config().num_key_value_heads, model.config().head_dim,
             torch::TensorOptions().dtype(model.compute_dtype()).device(model.model->embed_tokens->weight.device())) {
  model.check_taps(taps_);
}

TargetStep CachedTarget::forward(const torch::Tensor& tokens) {
  model::BackboneOutput out = model_.forward_cached(tokens, cache_, taps_);
  TargetStep step;
  step.hidden = out.hidden;
  if (!out.taps.empty()) step.taps = torch::cat(out.taps, 1);
  return step;
}

torch::Tensor CachedTarget::greedy_tokens(const torch::Tensor& hidden) {
  const auto rows = torch::arange(hidden.size(0), torch::TensorOptions().dtype(torch::kInt64).device(hidden.device()));
  return model_.logits_at(hidden, rows).argmax(-1);
}

}  // namespace topotrain::infer
