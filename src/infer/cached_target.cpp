#include "topotrain/infer/cached_target.h"

#include <limits>
#include <stdexcept>
#include <utility>

#include "topotrain/core/error.h"

namespace topotrain::infer {
namespace {

// q [n, Hq, D] of the last n positions of k and v [L, Hkv, D]: each query sees the keys at or
// before its own position. GQA without repeating k/v, as HF's repeat_kv groups the heads:
// query head h = kv * groups + g.
torch::Tensor cached_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      double scale) {
  const int64_t n = q.size(0), L = k.size(0), hkv = k.size(1), groups = q.size(1) / hkv, dim = q.size(2);
  auto qh = q.reshape({n, hkv, groups, dim}).permute({1, 2, 0, 3});       // [Hkv, G, n, D]
  auto scores = torch::matmul(qh, k.permute({1, 2, 0}).unsqueeze(1));    // [Hkv, G, n, L]
  const auto index = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
  auto future = torch::arange(L, index).unsqueeze(0) > torch::arange(L - n, L, index).unsqueeze(1);  // [n, L]
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  // Softmax in at least fp32, as the model's math path and HF's eager attention.
  const auto softmax_dtype = q.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  auto probs = torch::softmax(scores * scale, -1, softmax_dtype).to(q.scalar_type());
  auto out = torch::matmul(probs, v.permute({1, 0, 2}).unsqueeze(1));  // [Hkv, G, n, D]
  return out.permute({2, 0, 1, 3}).reshape({n, hkv * groups, dim});
}

}  // namespace

CachedTarget::CachedTarget(model::Qwen3CausalLMImpl& model, std::vector<int64_t> taps)
    : model_(model),
      taps_(std::move(taps)),
      cache_(model.config().num_hidden_layers, model.config().num_key_value_heads, model.config().head_dim,
             torch::TensorOptions().dtype(model.compute_dtype()).device(model.model->embed_tokens->weight.device())) {
  for (int64_t tap : taps_) {
    if (tap < 0 || tap >= model.config().num_hidden_layers) {
      throw std::invalid_argument(cat("CachedTarget: tap layer ", tap, " is outside [0, ",
                                      model.config().num_hidden_layers, ")"));
    }
  }
}

TargetStep CachedTarget::forward(const torch::Tensor& tokens) {
  const model::ModelConfig& c = model_.config();
  const int64_t n = tokens.numel(), first = cache_.length();
  if (tokens.dim() != 1 || n == 0 || tokens.scalar_type() != torch::kInt64) {
    throw std::invalid_argument(cat("CachedTarget::forward: tokens must be int64 [n] with n >= 1, got ",
                                    tokens.scalar_type(), " ", tokens.sizes()));
  }
  const auto dtype = model_.compute_dtype();
  const auto rotary =
      model::rotary_tables(torch::arange(first, first + n, tokens.options()), c.head_dim, c.rope_theta, dtype);
  // An empty cache: the chunk is a whole sequence, which the model's own causal kernel runs.
  model::DocumentLayout whole;
  if (first == 0) {
    const auto bounds = torch::tensor({int32_t{0}, static_cast<int32_t>(n)}, torch::kInt32).to(tokens.device());
    whole = model::layout_documents(bounds, n, {n}, model_.attention_backend());
  }
  const model::ExpertBackend experts = model_.expert_backend();
  std::vector<torch::Tensor> taps(taps_.size());
  model::ResidualStream stream{model_.model->embed_tokens->lookup(tokens, dtype), {}};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    auto layer = model_.layer(i);
    auto& attn = *layer->self_attn;
    auto [x, normed] = model::normed_stream(stream, layer->input_layernorm);
    auto queries = attn.project_queries(normed, rotary);
    auto kv = attn.project_keys_values(normed, rotary);
    auto cached = cache_.extend(i, kv.keys, kv.values);
    auto attended = first == 0 ? model::varlen_causal_attention(queries, kv.keys, kv.values, whole, attn.scale())
                               : cached_causal_attention(queries, cached.keys, cached.values, attn.scale());
    stream = layer->feed_forward(x, attn.project_output(attended), experts, nullptr);
    for (size_t t = 0; t < taps_.size(); ++t) {
      if (taps_[t] == i) taps[t] = stream.value();
    }
  }
  cache_.commit();
  TargetStep out;
  out.hidden = model::normed_stream(stream, model_.model->norm).normed;
  if (!taps.empty()) out.taps = torch::cat(taps, 1);
  return out;
}

torch::Tensor CachedTarget::greedy_tokens(const torch::Tensor& hidden) {
  const auto rows = torch::arange(hidden.size(0), torch::TensorOptions().dtype(torch::kInt64).device(hidden.device()));
  return model_.logits_at(hidden, rows).argmax(-1);
}

}  // namespace topotrain::infer
