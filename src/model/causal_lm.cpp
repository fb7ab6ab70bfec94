#include "topotrain/model/causal_lm.h"

#include <stdexcept>

#include "kernel_launch.h"
#include "topotrain/core/error.h"
#include "topotrain/model/accumulate_into_grad.h"

namespace topotrain::model {

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, int64_t layer) : index_(layer) {
  self_attn = register_module("self_attn", Attention(c));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  if (c.is_moe_layer(layer)) {
    sparse_mlp = register_module("mlp", SparseMoeBlock(c));
  } else {
    dense_mlp = register_module("mlp", DenseMlp(c.hidden_size, c.intermediate_size, c.initializer_range));
  }
}

torch::Tensor ResidualStream::value() const { return pending.defined() ? base + pending : base; }

NormedSum normed_stream(const ResidualStream& stream, const RMSNorm& norm) {
  if (!stream.pending.defined()) return {stream.base, rms_norm(stream.base, norm->weight, norm->eps())};
  return add_rms_norm(stream.base, stream.pending, norm->weight, norm->eps());
}

ResidualStream DecoderLayerImpl::forward(const ResidualStream& in, const LayerContext& context,
                                         ExpertBackend experts, RouterLoad* load) {
  auto [x, normed] = normed_stream(in, input_layernorm);
  return feed_forward(x, self_attn(normed, context, index_), experts, load);
}

ResidualStream DecoderLayerImpl::feed_forward(const torch::Tensor& x, const torch::Tensor& attention_out,
                                              ExpertBackend experts, RouterLoad* load) {
  auto [h, normed] = add_rms_norm(x, attention_out, post_attention_layernorm->weight, post_attention_layernorm->eps());
  return {h, sparse_mlp ? sparse_mlp(normed, experts, load) : dense_mlp(normed)};
}

EmbeddingImpl::EmbeddingImpl(int64_t vocab, int64_t hidden, double init_std) {
  weight = register_parameter("weight", torch::randn({vocab, hidden}) * init_std);
}

namespace {

// Rows of the table, cast to the compute dtype. Backward sums each token's gradient into its
// row: inside an AccumulateIntoGrad scope straight into .grad() (add_rows_into_grad), otherwise
// as autograd's embedding backward does, into a dense gradient of the table's size.
class EmbeddingLookupFunction : public torch::autograd::Function<EmbeddingLookupFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& weight,
                               const torch::Tensor& tokens, c10::ScalarType dtype) {
    ctx->saved_data["tokens"] = tokens;
    ctx->saved_data["table"] = weight;
    ctx->saved_data["into_grad"] = AccumulateIntoGrad::active();
    return torch::embedding(weight, tokens).to(dtype);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto tokens = ctx->saved_data["tokens"].toTensor();
    const auto table = ctx->saved_data["table"].toTensor();
    torch::Tensor grad_table;
    if (!ctx->saved_data["into_grad"].toBool() || !add_rows_into_grad(table, tokens, grads[0]))
      grad_table = rows_gradient(tokens, grads[0], table.size(0), table.scalar_type());
    return {grad_table, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& tokens) { return lookup(tokens, weight.scalar_type()); }

torch::Tensor EmbeddingImpl::lookup(const torch::Tensor& tokens, torch::ScalarType dtype) {
  if (!torch::GradMode::is_enabled() || !weight.requires_grad()) return torch::embedding(weight, tokens).to(dtype);
  return EmbeddingLookupFunction::apply(weight, tokens, dtype);
}

BackboneImpl::BackboneImpl(const ModelConfig& c) {
  embed_tokens = register_module("embed_tokens", Embedding(c.vocab_size, c.hidden_size, c.initializer_range));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(DecoderLayer(c, i));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

torch::ScalarType default_compute_dtype(const torch::Device& device) {
  return device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
}

CausalLMImpl::CausalLMImpl(const ModelConfig& config) : config_(config) {
  config_.validate();
  model = register_module("model", Backbone(config_));
  if (!config_.tie_word_embeddings) {
    lm_head = register_module("lm_head", Projection(config_.hidden_size, config_.vocab_size, config_.initializer_range));
  }
}

AttentionBackend CausalLMImpl::attention_backend() const {
  if (forced_attention_) return *forced_attention_;
  return choose_attention_backend(model->embed_tokens->weight.device(), compute_dtype_, config_.head_dim);
}

ExpertBackend CausalLMImpl::expert_backend() const {
  if (forced_experts_) return *forced_experts_;
  return choose_expert_backend(model->embed_tokens->weight.device(), compute_dtype_, config_);
}

void CausalLMImpl::set_expert_layout(ExpertLayout layout) {
  expert_layout_ = layout;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    if (auto moe = layer(i)->sparse_mlp) moe->set_layout(layout);
  }
}

ExpertLayout CausalLMImpl::expert_layout() const {
  return compute_dtype_ == model->embed_tokens->weight.scalar_type() ? ExpertLayout::expert_order : expert_layout_;
}

std::string CausalLMImpl::elementwise_backend() const {
  return own_kernels_apply(model->embed_tokens->weight.device(), compute_dtype_) ? "own CUDA kernels" : "torch ops";
}

LayerContext CausalLMImpl::layer_context(const PackedBatch& batch) const {
  LayerContext context;
  context.rotary = rotary_tables(batch.positions, config_, compute_dtype_);
  context.documents =
      layout_documents(batch.cu_seqlens, batch.max_seqlen, batch.sequence_lengths, attention_backend());
  return context;
}

DecoderLayer CausalLMImpl::layer(int64_t index) const {
  return DecoderLayer(model->layers->ptr<DecoderLayerImpl>(index));
}

void CausalLMImpl::check_taps(const std::vector<int64_t>& taps) const {
  const int64_t num_layers = config_.num_hidden_layers;
  for (int64_t tap : taps) {
    if (tap < 0 || tap >= num_layers) {
      throw std::invalid_argument(cat("tap layer ", tap, " is outside [0, ", num_layers, ")"));
    }
  }
}

BackboneOutput CausalLMImpl::run_layers(const torch::Tensor& tokens, const LayerContext& context,
                                             const std::vector<int64_t>& taps, RouterLoad* load) {
  check_taps(taps);
  const ExpertBackend experts = expert_backend();
  BackboneOutput out;
  out.taps.resize(taps.size());
  ResidualStream stream{model->embed_tokens->lookup(tokens, compute_dtype_), {}};
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    stream = layer(i)(stream, context, experts, load);
    for (size_t t = 0; t < taps.size(); ++t) {
      if (taps[t] == i) out.taps[t] = stream.value();
    }
  }
  out.hidden = normed_stream(stream, model->norm).normed;
  return out;
}

BackboneOutput CausalLMImpl::forward_backbone(const PackedBatch& batch, const std::vector<int64_t>& taps) {
  batch.check();
  RouterLoad load;
  BackboneOutput out = run_layers(batch.tokens, layer_context(batch), taps, &load);
  out.aux_loss = load_balancing_loss(load, config_.num_experts).to(out.hidden.device());
  out.peak_expert_load = peak_expert_load(load).to(out.hidden.device());
  return out;
}

BackboneOutput CausalLMImpl::forward_cached(const torch::Tensor& tokens, KvCache& cache,
                                                 const std::vector<int64_t>& taps) {
  const int64_t n = tokens.numel(), first = cache.length();
  if (tokens.dim() != 1 || n == 0 || tokens.scalar_type() != torch::kInt64) {
    throw std::invalid_argument(cat("forward_cached: tokens must be int64 [n] with n >= 1, got ", tokens.scalar_type(),
                                    " ", tokens.sizes()));
  }
  LayerContext context;
  context.rotary =
      rotary_tables(torch::arange(first, first + n, tokens.options()), config_, compute_dtype_);
  // The first rows of a sequence run as one document through the model's causal kernel.
  if (first == 0) {
    const auto bounds = torch::tensor({int32_t{0}, static_cast<int32_t>(n)}, torch::kInt32).to(tokens.device());
    context.documents = layout_documents(bounds, n, {n}, attention_backend());
  }
  context.cache = &cache;
  BackboneOutput out = run_layers(tokens, context, taps, nullptr);
  cache.commit();
  return out;
}

torch::Tensor CausalLMImpl::lm_head_weight() {
  return config_.tie_word_embeddings ? model->embed_tokens->weight : lm_head->weight;
}

torch::Tensor CausalLMImpl::lm_head_compute_values(torch::ScalarType dtype) {
  return lm_head_compute_.values({lm_head_weight()}, dtype);
}

torch::Tensor CausalLMImpl::logits_at(const torch::Tensor& hidden, const torch::Tensor& rows) {
  const auto weight = lm_head_compute_.get({lm_head_weight()}, hidden.scalar_type());
  return torch::matmul(hidden.index_select(0, rows), weight.t()).to(torch::kFloat32);
}

}  // namespace topotrain::model
