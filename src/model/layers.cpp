#include "topotrain/model/layers.h"

#include <cmath>
#include <vector>

#include "topotrain/model/swiglu.h"
#include "topotrain/torch_compat.h"

namespace topotrain::model {
namespace {

// A q/k norm's weight; undefined in a family without q/k norms, where norm_rotary only rotates.
torch::Tensor weight_of(const RMSNorm& norm) { return norm ? norm->weight : torch::Tensor(); }

}  // namespace

ProjectionImpl::ProjectionImpl(int64_t in_features, int64_t out_features, double init_std, bool with_bias) {
  weight = register_parameter("weight", torch::randn({out_features, in_features}) * init_std);
  if (with_bias) bias = register_parameter("bias", torch::zeros({out_features}));
}

torch::Tensor ProjectionImpl::forward(const torch::Tensor& x) {
  auto y = torch::matmul(x, compute_weight_.get({weight}, x.scalar_type()).t());
  return bias.defined() ? y + compute_bias_.get({bias}, x.scalar_type()) : y;
}

torch::Tensor FusedProjection::operator()(const torch::Tensor& x, std::initializer_list<Projection> projections) {
  std::vector<torch::Tensor> weights, biases;
  for (const auto& p : projections) {
    weights.push_back(p->weight);
    if (p->bias.defined()) biases.push_back(p->bias);
  }
  auto y = torch::matmul(x, weight_.get(weights, x.scalar_type()).t());
  if (biases.empty()) return y;
  TORCH_CHECK(biases.size() == weights.size(), "FusedProjection: some projections have a bias and some do not");
  return y + bias_.get(biases, x.scalar_type());
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return rms_norm(x, weight, eps_); }

AttentionImpl::AttentionImpl(const ModelConfig& c)
    : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
  const double std = c.initializer_range;
  const bool bias = c.qkv_bias();
  q_proj = register_module("q_proj", Projection(c.hidden_size, heads_ * head_dim_, std, bias));
  k_proj = register_module("k_proj", Projection(c.hidden_size, kv_heads_ * head_dim_, std, bias));
  v_proj = register_module("v_proj", Projection(c.hidden_size, kv_heads_ * head_dim_, std, bias));
  o_proj = register_module("o_proj", Projection(heads_ * head_dim_, c.hidden_size, std));
  if (c.qk_norm()) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, c.rms_norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, c.rms_norm_eps));
  }
}

torch::Tensor AttentionImpl::normed_rotated(const torch::Tensor& projected, int64_t heads, const RMSNorm& norm,
                                            const RotaryTables& rotary) const {
  return norm_rotary(projected.view({projected.size(0), heads, head_dim_}), weight_of(norm), norm ? norm->eps() : 0.0,
                     rotary);
}

torch::Tensor AttentionImpl::project_queries(const torch::Tensor& x, const RotaryTables& rotary) {
  return normed_rotated(q_proj(x), heads_, q_norm, rotary);
}

AttentionImpl::KeysValues AttentionImpl::project_keys_values(const torch::Tensor& x, const RotaryTables& rotary) {
  const int64_t width = kv_heads_ * head_dim_;
  auto kv = kv_(x, {k_proj, v_proj}).split_with_sizes({width, width}, 1);
  return {normed_rotated(kv[0], kv_heads_, k_norm, rotary), kv[1].view({x.size(0), kv_heads_, head_dim_})};
}

torch::Tensor AttentionImpl::project_output(const torch::Tensor& attended) {
  return o_proj(attended.reshape({attended.size(0), heads_ * head_dim_}));
}

double AttentionImpl::scale() const { return 1.0 / std::sqrt(static_cast<double>(head_dim_)); }

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const LayerContext& context, int64_t layer) {
  auto heads = rotated_heads(qkv_(x, {q_proj, k_proj, v_proj}), heads_, kv_heads_,
                             weight_of(q_norm), weight_of(k_norm), q_norm ? q_norm->eps() : 0.0, context.rotary);
  if (context.cache != nullptr) {
    const bool continues = context.cache->length() > 0;
    const auto rows = context.cache->extend(layer, heads.k, heads.v);
    // After cached rows, the queries see those too; the first rows of a sequence are a whole
    // document, for the model's causal kernel.
    if (continues) return project_output(cached_causal_attention(heads.q, rows.keys, rows.values, scale()));
  }
  return project_output(varlen_causal_attention(heads.q, heads.k, heads.v, context.documents, scale()));
}

DenseMlpImpl::DenseMlpImpl(int64_t hidden, int64_t intermediate, double init_std) {
  gate_proj = register_module("gate_proj", Projection(hidden, intermediate, init_std));
  up_proj = register_module("up_proj", Projection(hidden, intermediate, init_std));
  down_proj = register_module("down_proj", Projection(intermediate, hidden, init_std));
}

torch::Tensor DenseMlpImpl::forward(const torch::Tensor& x) {
  return down_proj(swiglu(gate_up_(x, {gate_proj, up_proj})));
}

}  // namespace topotrain::model
