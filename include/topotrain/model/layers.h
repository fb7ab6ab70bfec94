// Building blocks of a decoder layer (Qwen3, Llama 3.x, Qwen2), parameter names as in HF
// transformers.
//
// Precision: parameters stay fp32 (the optimizer's master copy); every block computes in
// the dtype of its input activations, with each weight in that dtype from a ComputeWeight
// (cast once per change of the masters, differentiable back to them), so gradients arrive in
// fp32 on the parameters and no autocast state exists. The caller picks the compute dtype
// once, by the dtype the embedding output is cast to (see CausalLM).
#pragma once

#include <cstdint>
#include <initializer_list>

#include <torch/torch.h>

#include "topotrain/model/attention.h"
#include "topotrain/model/compute_weight.h"
#include "topotrain/model/config.h"
#include "topotrain/model/kv_cache.h"
#include "topotrain/model/rms_norm.h"
#include "topotrain/model/rotary.h"

namespace topotrain::model {

// A linear map, y = x W^T (+ b), W [out, in] (HF nn.Linear layout); a bias only where the
// model family has one (Qwen2's q/k/v projections), registered as "bias" then.
class ProjectionImpl : public torch::nn::Module {
 public:
  ProjectionImpl(int64_t in_features, int64_t out_features, double init_std, bool with_bias = false);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  torch::Tensor bias;  // undefined without one

 private:
  ComputeWeight compute_weight_, compute_bias_;
};
TORCH_MODULE(Projection);

// x W^T (+ b) for W the row-wise concatenation of the projections' weights in x's dtype (and b
// of their biases, where they have them: all or none): one GEMM where there were as many as
// projections, and in backward one GEMM for the gradient of x where autograd summed one per
// projection. Split the result with split_with_sizes, whose backward concatenates (narrow's
// would zero-fill a whole copy each).
class FusedProjection {
 public:
  torch::Tensor operator()(const torch::Tensor& x, std::initializer_list<Projection> projections);

 private:
  ComputeWeight weight_, bias_;  // the concatenations, kept while the masters are unchanged
};

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  double eps() const { return eps_; }
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// What every layer of one forward shares.
struct LayerContext {
  RotaryTables rotary;
  DocumentLayout documents;
  // KV-cached decoding: the forward's rows are one sequence's next ones, at positions
  // cache->length() on (documents lays them out as that one document). Each attention appends
  // its keys and values to its layer's rows and attends to all of them; the caller commits.
  KvCache* cache = nullptr;
};

// GQA self-attention with RoPE, and the family's switches (ModelConfig): per-head
// q_norm/k_norm before RoPE (Qwen3), biases on q, k and v (Qwen2).
class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelConfig& config);
  // x [T, hidden]; `layer` is this attention's decoder layer (its rows in context.cache).
  torch::Tensor forward(const torch::Tensor& x, const LayerContext& context, int64_t layer);

  // The pieces of forward, for attention patterns other than causal self-attention (the
  // DFlash drafter projects its context and its blocks with the same weights).
  torch::Tensor project_queries(const torch::Tensor& x, const RotaryTables& rotary);  // [T, heads, head_dim]
  struct KeysValues {
    torch::Tensor keys, values;  // [T, kv_heads, head_dim]; keys rotated (and normed, with q/k norms)
  };
  KeysValues project_keys_values(const torch::Tensor& x, const RotaryTables& rotary);
  torch::Tensor project_output(const torch::Tensor& attended);  // [T, heads, head_dim] -> [T, hidden]
  double scale() const;  // 1 / sqrt(head_dim)

  Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // null without q/k norms

 private:
  // A [T, heads * head_dim] projection (or a column slice of a fused one) as heads, normed
  // (where `norm` is not null) and rotated.
  torch::Tensor normed_rotated(const torch::Tensor& projected, int64_t heads, const RMSNorm& norm,
                               const RotaryTables& rotary) const;

  int64_t heads_, kv_heads_, head_dim_;
  FusedProjection qkv_, kv_;
};
TORCH_MODULE(Attention);

// SwiGLU feed-forward: down(silu(gate(x)) * up(x)), gate and up as one GEMM.
class DenseMlpImpl : public torch::nn::Module {
 public:
  DenseMlpImpl(int64_t hidden, int64_t intermediate, double init_std);
  torch::Tensor forward(const torch::Tensor& x);

  Projection gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  FusedProjection gate_up_;
};
TORCH_MODULE(DenseMlp);

}  // namespace topotrain::model
