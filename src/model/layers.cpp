#include "topotrain/model/layers.h"

#include <cmath>

#include "topotrain/torch_compat.h"

namespace topotrain::model {

ProjectionImpl::ProjectionImpl(int64_t in_features, int64_t out_features, double init_std) {
  weight = register_parameter("weight", torch::randn({out_features, in_features}) * init_std);
}

torch::Tensor ProjectionImpl::forward(const torch::Tensor& x) {
  return torch::matmul(x, weight.to(x.scalar_type()).t());
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  torch::Tensor fused;
  if (compat::fused_rms_norm(x, weight, eps, fused)) return fused;
  auto xf = x.to(torch::kFloat32);
  auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight.to(x.scalar_type()) * normed.to(x.scalar_type());
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return rms_norm(x, weight, eps_); }

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

AttentionImpl::AttentionImpl(const ModelConfig& c)
    : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
  const double std = c.initializer_range;
  q_proj = register_module("q_proj", Projection(c.hidden_size, heads_ * head_dim_, std));
  k_proj = register_module("k_proj", Projection(c.hidden_size, kv_heads_ * head_dim_, std));
  v_proj = register_module("v_proj", Projection(c.hidden_size, kv_heads_ * head_dim_, std));
  o_proj = register_module("o_proj", Projection(heads_ * head_dim_, c.hidden_size, std));
  q_norm = register_module("q_norm", RMSNorm(head_dim_, c.rms_norm_eps));
  k_norm = register_module("k_norm", RMSNorm(head_dim_, c.rms_norm_eps));
}

torch::Tensor AttentionImpl::project_queries(const torch::Tensor& x, const RotaryTables& rotary) {
  return apply_rotary(q_norm(q_proj(x).view({x.size(0), heads_, head_dim_})), rotary);
}

AttentionImpl::KeysValues AttentionImpl::project_keys_values(const torch::Tensor& x, const RotaryTables& rotary) {
  const int64_t tokens = x.size(0);
  return {apply_rotary(k_norm(k_proj(x).view({tokens, kv_heads_, head_dim_})), rotary),
          v_proj(x).view({tokens, kv_heads_, head_dim_})};
}

torch::Tensor AttentionImpl::project_output(const torch::Tensor& attended) {
  return o_proj(attended.reshape({attended.size(0), heads_ * head_dim_}));
}

double AttentionImpl::scale() const { return 1.0 / std::sqrt(static_cast<double>(head_dim_)); }

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const LayerContext& context) {
  auto q = project_queries(x, context.rotary);
  auto kv = project_keys_values(x, context.rotary);
  return project_output(varlen_causal_attention(q, kv.keys, kv.values, context.cu_seqlens, context.max_seqlen, scale(),
                                                context.attention));
}

DenseMlpImpl::DenseMlpImpl(int64_t hidden, int64_t intermediate, double init_std) {
  gate_proj = register_module("gate_proj", Projection(hidden, intermediate, init_std));
  up_proj = register_module("up_proj", Projection(hidden, intermediate, init_std));
  down_proj = register_module("down_proj", Projection(intermediate, hidden, init_std));
}

torch::Tensor DenseMlpImpl::forward(const torch::Tensor& x) {
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

}  // namespace topotrain::model
