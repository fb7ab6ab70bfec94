#include "topotrain/infer/dflash_proposer.h"

#include <stdexcept>

#include "topotrain/core/error.h"

namespace topotrain::infer {
namespace {

torch::TensorOptions drafter_options(const model::DFlashDrafterImpl& drafter) {
  return torch::TensorOptions().dtype(drafter.compute_dtype()).device(drafter.fc->weight.device());
}

// The one block of a proposal as dflash_attention takes blocks: one document whose context is
// every cached row, all of them before the anchor.
model::DFlashBlocks one_block(int64_t block_size, int64_t start) {
  model::DFlashBlocks blocks;
  blocks.block_size = block_size;
  blocks.anchor_rows = {start};
  blocks.document_blocks = {0, 1};
  blocks.document_begin = {0};
  blocks.visible_context = {start};
  blocks.slot_valid.assign(static_cast<size_t>(block_size), 0);
  return blocks;
}

}  // namespace

DFlashProposer::DFlashProposer(model::DFlashDrafterImpl& drafter)
    : drafter_(drafter),
      cache_(static_cast<int64_t>(drafter.layers->size()), drafter.config().target.num_key_value_heads,
             drafter.config().target.head_dim, drafter_options(drafter)) {}

void DFlashProposer::extend_context(const torch::Tensor& taps) {
  const model::ModelConfig& c = drafter_.config().target;
  const int64_t width = static_cast<int64_t>(drafter_.taps().size()) * c.hidden_size;
  if (taps.dim() != 2 || taps.size(1) != width) {
    throw std::invalid_argument(cat("DFlashProposer: tap states must be [rows, ", width, "], got ", taps.sizes()));
  }
  const auto options = drafter_options(drafter_);
  const int64_t first = cache_.length(), m = taps.size(0);
  auto context = drafter_.hidden_norm(drafter_.fc(taps.to(options)));
  const auto positions = torch::arange(first, first + m, options.dtype(torch::kInt64));
  const auto rotary = model::rotary_tables(positions, c, drafter_.compute_dtype());
  for (size_t i = 0; i < drafter_.layers->size(); ++i) {
    auto kv = drafter_.layers->ptr<model::DecoderLayerImpl>(i)->self_attn->project_keys_values(context, rotary);
    cache_.extend(static_cast<int64_t>(i), kv.keys, kv.values);
  }
  cache_.commit();
}

torch::Tensor DFlashProposer::block_hidden(int64_t next) {
  const model::DFlashConfig& config = drafter_.config();
  const model::ModelConfig& c = config.target;
  const int64_t B = config.block_size, start = cache_.length();
  const auto options = drafter_options(drafter_);
  auto block = torch::full({B}, config.mask_token_id, options.dtype(torch::kInt64));
  block[0] = next;
  const auto positions = torch::arange(start, start + B, options.dtype(torch::kInt64));
  const auto rotary = model::rotary_tables(positions, c, drafter_.compute_dtype());
  // One block, so no chunk needs padding to more blocks for cuDNN's plans to repeat.
  auto attention = drafter_.attention_options();
  attention.max_chunk_blocks = 1;
  return drafter_.draft_layers(
      block, rotary, one_block(B, start),
      [&](size_t layer, model::AttentionImpl&) {
        const auto context = cache_.rows(static_cast<int64_t>(layer));
        return model::AttentionImpl::KeysValues{context.keys, context.values};
      },
      attention);
}

torch::Tensor DFlashProposer::block_logits(int64_t next) {
  const model::DFlashConfig& config = drafter_.config();
  const auto hidden = block_hidden(next).narrow(0, 1, config.block_size - 1);
  const auto normed = model::rms_norm(hidden, drafter_.target_norm, config.target.rms_norm_eps);
  return torch::matmul(normed, drafter_.target_lm_head.to(normed.scalar_type()).t()).to(torch::kFloat32);
}

torch::Tensor DFlashProposer::propose(int64_t next) { return block_logits(next).argmax(-1); }

}  // namespace topotrain::infer
