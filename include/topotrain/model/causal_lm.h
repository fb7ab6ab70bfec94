// The causal language model of every family topotrain builds (Qwen3, Qwen3-MoE, Llama 3.x,
// Qwen2: ModelConfig's switches) over packed micro-batches. Parameter names are
// HF's (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...,
// lm_head.weight) except the stacked experts, model.layers.N.mlp.experts.gate_up_proj
// [E, 2I, H] and .down_proj [E, H, I]; hf_checkpoint.h maps those to HF's per-expert names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "topotrain/batch/packed_batch.h"
#include "topotrain/model/attention.h"
#include "topotrain/model/config.h"
#include "topotrain/model/kv_cache.h"
#include "topotrain/model/layers.h"
#include "topotrain/model/moe.h"
#include "topotrain/model/rms_norm.h"

namespace topotrain::model {

// The residual stream between decoder layers, held as base + pending: a layer leaves its MLP
// output pending so that the next norm (the next layer's input norm, or the final norm) adds
// it in the same kernel (add_rms_norm) instead of a separate pass over [T, hidden] each way.
struct ResidualStream {
  torch::Tensor base, pending;  // pending undefined: the stream is base alone
  // base + pending, materialised (one add): for taps and outputs that are not normed.
  torch::Tensor value() const;
};

// The stream's value and its norm, the pending add fused into the norm.
NormedSum normed_stream(const ResidualStream& stream, const RMSNorm& norm);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& config, int64_t layer);
  // One pre-norm block, x -> h = x + attn(input_norm(x)) -> h + mlp(post_norm(h)), over the
  // stream's [T, hidden] rows in the compute dtype; the result leaves the MLP output pending.
  // Router statistics go to `load` (MoE layers) where given.
  ResidualStream forward(const ResidualStream& in, const LayerContext& context, ExpertBackend experts,
                         RouterLoad* load);
  // The second half of forward, from x and the attention output: h = x + attention_out (fused
  // into the post-attention norm), then {h, mlp(post_attention_layernorm(h))}.
  ResidualStream feed_forward(const torch::Tensor& x, const torch::Tensor& attention_out, ExpertBackend experts,
                              RouterLoad* load);

  Attention self_attn{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  DenseMlp dense_mlp{nullptr};        // registered as "mlp" in dense layers
  SparseMoeBlock sparse_mlp{nullptr};  // registered as "mlp" in MoE layers

 private:
  int64_t index_;  // the layer's index in its model: its rows of a KV cache
};
TORCH_MODULE(DecoderLayer);

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t vocab, int64_t hidden, double init_std);
  // The rows of `tokens` in the table's dtype.
  torch::Tensor forward(const torch::Tensor& tokens);
  // The rows cast to `dtype`; inside a model::AccumulateIntoGrad scope the backward adds the
  // rows' gradients into weight.grad() where it is defined (accumulate_into_grad.h).
  torch::Tensor lookup(const torch::Tensor& tokens, torch::ScalarType dtype);
  torch::Tensor weight;
};
TORCH_MODULE(Embedding);

// HF's Qwen3Model: embeddings, decoder layers, final norm.
class BackboneImpl : public torch::nn::Module {
 public:
  explicit BackboneImpl(const ModelConfig& config);
  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
};
TORCH_MODULE(Backbone);

struct BackboneOutput {
  torch::Tensor hidden;             // [T, hidden] after the final norm, compute dtype
  std::vector<torch::Tensor> taps;  // outputs of the requested decoder layers, in request order
  // forward_backbone only (decoding has no loss to balance; undefined from forward_cached):
  torch::Tensor aux_loss;          // fp32 scalar: HF's load-balancing loss (0 for dense), not yet
                                   // multiplied by router_aux_loss_coef
  torch::Tensor peak_expert_load;  // fp32 scalar: peak_expert_load (moe.h) of this forward
};

// bf16 on CUDA, fp32 elsewhere.
torch::ScalarType default_compute_dtype(const torch::Device& device);

class CausalLMImpl : public torch::nn::Module {
 public:
  // Parameters are created fp32 on the CPU, initialised as HF does (normal(0,
  // initializer_range), norms at one) from torch's global generator; move with to().
  explicit CausalLMImpl(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  torch::ScalarType compute_dtype() const { return compute_dtype_; }
  void set_compute_dtype(torch::ScalarType dtype) { compute_dtype_ = dtype; }
  // The kernels the next forward will use for the current parameter device and compute
  // dtype; force_* pins one (e.g. the math path as a reference on GPU).
  AttentionBackend attention_backend() const;
  ExpertBackend expert_backend() const;
  // "own CUDA kernels" where the norms, rotary, SwiGLU, MoE combine and loss rows run on
  // topotrain's kernels (a CUDA build, parameters on a GPU, bf16 compute), else "torch ops".
  std::string elementwise_backend() const;
  void force_attention_backend(std::optional<AttentionBackend> backend) { forced_attention_ = backend; }
  void force_expert_backend(std::optional<ExpertBackend> backend) { forced_experts_ = backend; }
  // The experts' row-group layout of every MoE layer (busiest_first until set).
  void set_expert_layout(ExpertLayout layout);
  // The layout training's forwards run in: the one set where it acts (a compute dtype other
  // than the fp32 masters'), else expert order.
  ExpertLayout expert_layout() const;

  // Taps are decoder layer indices in [0, num_hidden_layers); tap i is the output of
  // layer i (HF's hidden_states[i + 1]).
  BackboneOutput forward_backbone(const PackedBatch& batch, const std::vector<int64_t>& taps = {});
  // KV-cached decoding of one sequence: `tokens` (int64 [n], n >= 1) at positions
  // cache.length()..+n-1, attending to the cached rows before them, through the same layers
  // as forward_backbone; their keys and values are appended to `cache` and committed. The cache
  // must have this model's layers and kv heads, in the compute dtype on the parameters' device.
  // A whole sequence at once and any split of it into such forwards agree up to rounding.
  BackboneOutput forward_cached(const torch::Tensor& tokens, KvCache& cache, const std::vector<int64_t>& taps = {});
  // Throws std::invalid_argument unless every tap is a decoder layer index.
  void check_taps(const std::vector<int64_t>& taps) const;
  // lm_head at the given rows of `hidden` only: fp32 [rows, vocab].
  torch::Tensor logits_at(const torch::Tensor& hidden, const torch::Tensor& rows);
  // lm_head's parameter (the embedding when tied), fp32 master: the loss multiplies by its
  // kept compute-dtype values and hands back an fp32 gradient.
  torch::Tensor lm_head_weight();
  // Its values in `dtype`, kept between micro-batches while the master is unchanged
  // (ComputeWeight::values): what the LM loss multiplies by.
  torch::Tensor lm_head_compute_values(torch::ScalarType dtype);

  // Pieces of forward_backbone, public so that a caller can run layers one by one.
  LayerContext layer_context(const PackedBatch& batch) const;
  DecoderLayer layer(int64_t index) const;

  Backbone model{nullptr};
  Projection lm_head{nullptr};  // null when tie_word_embeddings

 private:
  // Embedding, the decoder layers and the final norm over `tokens` in `context`: the layer
  // loop of every forward. Router statistics go to `load` where given.
  BackboneOutput run_layers(const torch::Tensor& tokens, const LayerContext& context,
                            const std::vector<int64_t>& taps, RouterLoad* load);

  ModelConfig config_;
  torch::ScalarType compute_dtype_ = torch::kFloat32;
  std::optional<AttentionBackend> forced_attention_;
  std::optional<ExpertBackend> forced_experts_;
  ExpertLayout expert_layout_ = ExpertLayout::busiest_first;
  ComputeWeight lm_head_compute_;
};
TORCH_MODULE(CausalLM);

}  // namespace topotrain::model
