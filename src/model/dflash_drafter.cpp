#include "topotrain/model/dflash_drafter.h"

#include <cmath>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/model/host_values.h"
#include "topotrain/model/lm_loss.h"

namespace topotrain::model {
namespace {

void check_target_tensor(const torch::Tensor& t, torch::IntArrayRef expected, const char* name) {
  if (!t.defined() || t.sizes() != expected) {
    throw std::invalid_argument(cat("DFlash drafter: target tensor ", name, " must have shape ", expected, ", got ",
                                    t.defined() ? t.sizes() : torch::IntArrayRef{}));
  }
}

// The rows of the loss, on the host: slot row in the block output, the token it predicts,
// the target's row whose next-token distribution it is (for KL), its slot and weight.
struct LossRows {
  std::vector<int64_t> slot_row, label_row, teacher_row, slot;
  std::vector<float> weight;
  double weight_sum = 0;
  std::vector<int64_t> slot_valid;
};

LossRows loss_rows(const DFlashBlocks& blocks, double gamma) {
  const int64_t B = blocks.block_size;
  LossRows r;
  r.slot_valid.assign(B, 0);
  for (int64_t i = 0; i < blocks.num_blocks(); ++i) {
    for (int64_t k = 1; k < B; ++k) {
      if (!blocks.slot_valid[i * B + k]) continue;
      const double w = dflash_slot_weight(k, gamma);
      r.slot_row.push_back(i * B + k);
      r.label_row.push_back(blocks.anchor_rows[i] + k);
      r.teacher_row.push_back(blocks.anchor_rows[i] + k - 1);
      r.slot.push_back(k);
      r.weight.push_back(static_cast<float>(w));
      r.weight_sum += w;
      ++r.slot_valid[k];
    }
  }
  return r;
}

}  // namespace

double dflash_slot_weight(int64_t slot, double gamma) { return std::exp(-static_cast<double>(slot - 1) / gamma); }

DFlashDrafterImpl::DFlashDrafterImpl(const DFlashConfig& config) : config_(config) {
  config_.validate();
  taps_ = config_.resolved_taps();
  const ModelConfig c = config_.layer_config();
  const int64_t h = c.hidden_size;
  fc = register_module("fc", Projection(static_cast<int64_t>(taps_.size()) * h, h, c.initializer_range));
  hidden_norm = register_module("hidden_norm", RMSNorm(h, c.rms_norm_eps));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(DecoderLayer(c, i));
  target_embed_tokens =
      register_buffer("target_embed_tokens", torch::randn({c.vocab_size, h}) * c.initializer_range);
  target_norm = register_buffer("target_norm", torch::ones({h}));
  target_lm_head = register_buffer("target_lm_head", torch::randn({c.vocab_size, h}) * c.initializer_range);
}

void DFlashDrafterImpl::set_compute_dtype(torch::ScalarType dtype) {
  compute_dtype_ = dtype;
  torch::NoGradGuard no_grad;
  // set_data swaps the storage of the registered buffer itself, so named_buffers() and
  // to(device) keep seeing it.
  for (auto* t : {&target_embed_tokens, &target_norm, &target_lm_head}) t->set_data(t->to(dtype));
}

DFlashAttentionOptions DFlashDrafterImpl::attention_options() const {
  if (forced_attention_) return *forced_attention_;
  DFlashAttentionOptions options;
  options.backend = choose_dflash_attention_backend(fc->weight.device(), compute_dtype_);
  return options;
}

void DFlashDrafterImpl::load_target_tensors(const torch::Tensor& embed_tokens, const torch::Tensor& final_norm,
                                            const torch::Tensor& lm_head) {
  const int64_t v = config_.target.vocab_size, h = config_.target.hidden_size;
  check_target_tensor(embed_tokens, {v, h}, "model.embed_tokens.weight");
  check_target_tensor(final_norm, {h}, "model.norm.weight");
  check_target_tensor(lm_head, {v, h}, "lm_head.weight");
  torch::NoGradGuard no_grad;
  target_embed_tokens.copy_(embed_tokens);
  target_norm.copy_(final_norm);
  target_lm_head.copy_(lm_head);
}

void DFlashDrafterImpl::load_target_tensors(CausalLMImpl& target) {
  const auto& embed = target.model->embed_tokens->weight;
  load_target_tensors(embed, target.model->norm->weight, target.lm_head ? target.lm_head->weight : embed);
}

void DFlashDrafterImpl::check_batch(const DFlashBatch& batch, const DFlashBlocks& blocks) const {
  batch.packed.check();
  const int64_t tokens = batch.packed.num_tokens(), h = config_.target.hidden_size;
  const auto want_taps = static_cast<int64_t>(taps_.size()) * h;
  if (!batch.taps.defined() || batch.taps.dim() != 2 || batch.taps.size(0) != tokens || batch.taps.size(1) != want_taps) {
    throw std::invalid_argument(cat("DFlash batch: taps must be [", tokens, ", ", want_taps, "] (", taps_.size(),
                                    " tap layers x hidden ", h, "), got ",
                                    batch.taps.defined() ? batch.taps.sizes() : torch::IntArrayRef{}));
  }
  if (config_.loss == DFlashLoss::kl &&
      (!batch.final_hidden.defined() || batch.final_hidden.sizes() != torch::IntArrayRef{tokens, h})) {
    throw std::invalid_argument(cat("DFlash batch: loss kl needs the target's final hidden state [", tokens, ", ", h,
                                    "] in final_hidden"));
  }
  if (blocks.block_size != config_.block_size || blocks.num_documents() != batch.packed.num_sequences()) {
    throw std::invalid_argument(cat("DFlash batch: the blocks were built for block size ", blocks.block_size, " and ",
                                    blocks.num_documents(), " documents; the drafter has block size ",
                                    config_.block_size, " and the batch ", batch.packed.num_sequences(), " documents"));
  }
}

torch::Tensor DFlashDrafterImpl::forward_blocks(const DFlashBatch& batch, const DFlashBlocks& blocks) {
  check_batch(batch, blocks);
  const ModelConfig& c = config_.target;
  const int64_t B = config_.block_size, n = blocks.num_blocks();
  const auto device = fc->weight.device();

  auto context = hidden_norm(fc(batch.taps.to(compute_dtype_)));  // [T, H]
  const RotaryTables context_rotary = rotary_tables(batch.packed.positions, c, compute_dtype_);

  auto anchors = host_values_on(blocks.anchor_rows, device);
  auto slots = torch::arange(B, anchors.options());
  auto block_tokens = torch::full({n, B}, config_.mask_token_id, anchors.options());
  block_tokens.select(1, 0).copy_(batch.packed.tokens.index_select(0, anchors));
  auto block_positions = (batch.packed.positions.index_select(0, anchors).unsqueeze(1) + slots).reshape({n * B});
  const RotaryTables block_rotary = rotary_tables(block_positions, c, compute_dtype_);

  return draft_layers(
      block_tokens.reshape({n * B}), block_rotary, blocks,
      [&](size_t, AttentionImpl& attn) { return attn.project_keys_values(context, context_rotary); },
      attention_options());
}

torch::Tensor DFlashDrafterImpl::draft_layers(const torch::Tensor& block_tokens, const RotaryTables& block_rotary,
                                              const DFlashBlocks& blocks, const ContextKeysValues& context_kv,
                                              const DFlashAttentionOptions& attention) {
  ResidualStream stream{torch::embedding(target_embed_tokens, block_tokens).to(compute_dtype_), {}};
  const auto plan = plan_dflash_attention(blocks, attention, block_tokens.options().dtype(compute_dtype_));
  for (size_t i = 0; i < layers->size(); ++i) {
    auto& layer = *layers->ptr<DecoderLayerImpl>(i);
    auto& attn = *layer.self_attn;
    auto [x, normed] = normed_stream(stream, layer.input_layernorm);
    auto queries = attn.project_queries(normed, block_rotary);
    auto block_kv = attn.project_keys_values(normed, block_rotary);
    const AttentionImpl::KeysValues context = context_kv(i, attn);
    auto attended =
        dflash_attention(queries, context.keys, context.values, block_kv.keys, block_kv.values, plan, attn.scale());
    stream = layer.feed_forward(x, attn.project_output(attended), ExpertBackend::sorted_loop, nullptr);
  }
  return stream.value();
}

DFlashStepOutput DFlashDrafterImpl::forward(const DFlashBatch& batch, const DFlashBlocks& blocks) {
  auto hidden = forward_blocks(batch, blocks);
  const auto device = hidden.device();
  const int64_t B = config_.block_size;
  const LossRows rows = loss_rows(blocks, config_.gamma);

  DFlashStepOutput out;
  out.num_blocks = blocks.num_blocks();
  out.weight_sum = rows.weight_sum;
  out.slot_valid = rows.slot_valid;
  out.slot_correct = torch::zeros({B}, torch::TensorOptions().dtype(torch::kInt64).device(device));
  if (rows.slot_row.empty()) {
    // Nothing to learn from in this micro-batch: a zero loss still reaches every parameter,
    // so that backward (and a gradient reducer waiting on every parameter) runs as usual.
    out.loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
    for (const auto& p : parameters()) out.loss_sum = out.loss_sum + p.sum().to(torch::kFloat32) * 0;
    return out;
  }

  auto slot_rows = host_values_on(rows.slot_row, device);
  auto labels = batch.packed.tokens.index_select(0, host_values_on(rows.label_row, device));
  auto normed = rms_norm(hidden.index_select(0, slot_rows), target_norm, config_.target.rms_norm_eps);
  LinearCrossEntropyOptions options;
  options.chunk_rows = config_.loss_chunk_rows;
  options.row_weights = host_values_on(rows.weight, device);
  options.argmax = true;
  if (config_.loss == DFlashLoss::kl) {
    const auto teacher_rows = host_values_on(rows.teacher_row, device);
    options.teacher_hidden = batch.final_hidden.index_select(0, teacher_rows).to(compute_dtype_);
  }
  auto ce = linear_cross_entropy(normed, target_lm_head.to(compute_dtype_), labels, options);
  out.loss_sum = ce.loss;
  out.label_slots = host_values_on(rows.slot, device);
  out.labels = labels;
  out.slot_correct.index_add_(0, out.label_slots, ce.argmax.eq(labels).to(torch::kInt64));
  return out;
}

}  // namespace topotrain::model
