#include "topotrain/model/dflash_config.h"

#include <algorithm>
#include <cfenv>
#include <cmath>

#include "topotrain/core/error.h"
#include "topotrain/model/model_cost.h"

namespace topotrain::model {

std::string to_string(DFlashLoss loss) { return loss == DFlashLoss::kl ? "kl" : "ce"; }

DFlashLoss parse_dflash_loss(const std::string& name, const std::string& source) {
  if (name == "ce") return DFlashLoss::cross_entropy;
  if (name == "kl") return DFlashLoss::kl;
  throw ConfigError(cat(source, ": unknown DFlash loss '", name, "' (use \"ce\" or \"kl\")"));
}

std::vector<int64_t> default_taps(int64_t num_target_layers, int64_t num_draft_layers) {
  if (num_draft_layers <= 0 || num_target_layers < 4) {
    throw ConfigError(cat("default DFlash taps need a target of at least 4 layers and at least one draft layer, got ",
                          num_target_layers, " target layers and ", num_draft_layers, " draft layers"));
  }
  if (num_draft_layers == 1) return {num_target_layers / 2};
  const double first = 1, span = static_cast<double>(num_target_layers - 4);
  std::vector<int64_t> taps;
  // nearbyint under the default rounding mode rounds half to even, like Python's round.
  for (int64_t i = 0; i < num_draft_layers; ++i) {
    taps.push_back(static_cast<int64_t>(std::nearbyint(first + static_cast<double>(i) * span /
                                                                   static_cast<double>(num_draft_layers - 1))));
  }
  return taps;
}

std::string taps_text(const std::vector<int64_t>& taps) {
  std::string text;
  for (const int64_t layer : taps) text += (text.empty() ? "" : ",") + std::to_string(layer);
  return text;
}

std::vector<int64_t> DFlashConfig::resolved_taps() const {
  return taps.empty() ? default_taps(target.num_hidden_layers, num_draft_layers) : taps;
}

void DFlashConfig::validate() const {
  target.validate();
  auto fail = [&](const std::string& what) { throw ConfigError(cat(source, ": ", what)); };
  if (num_draft_layers <= 0) fail(cat("num_draft_layers must be positive, got ", num_draft_layers));
  if (block_size < 2) fail(cat("block_size must be at least 2 (an anchor and one predicted token), got ", block_size));
  // A block's positions run from its anchor on: past the target's positions it is no block
  // the target could verify (and its rows, anchors x block_size, would not fit memory).
  if (block_size > target.max_position_embeddings)
    fail(cat("block_size ", block_size, " is larger than the target's max_position_embeddings (",
             target.max_position_embeddings, "); DFlash drafts blocks of ~16 tokens"));
  if (max_anchors <= 0) fail(cat("max_anchors must be positive, got ", max_anchors));
  if (!(gamma > 0)) fail(cat("gamma must be positive, got ", gamma));
  if (loss_chunk_rows <= 0) fail(cat("loss_chunk_rows must be positive, got ", loss_chunk_rows));
  if (mask_token_id < 0 || mask_token_id >= target.vocab_size) {
    fail(cat("mask_token_id must be a token of the target's vocabulary [0, ", target.vocab_size, "), got ",
             mask_token_id, " (set the mask token, e.g. an unused special token of the tokenizer)"));
  }
  if (target.intermediate_size <= 0) fail("the target's intermediate_size (the drafter's MLP width) must be positive");
  if (!taps.empty() || target.num_hidden_layers >= 4) {
    const std::vector<int64_t> layers = resolved_taps();
    for (auto tap = layers.begin(); tap != layers.end(); ++tap) {
      if (*tap < 0 || *tap >= target.num_hidden_layers) {
        fail(cat("tap layer ", *tap, " is outside the target's layers [0, ", target.num_hidden_layers, ")"));
      }
      // The same layer twice feeds the drafter one hidden state as two.
      if (std::find(layers.begin(), tap, *tap) != tap) fail(cat("tap layer ", *tap, " is listed twice"));
    }
  } else {
    fail(cat("the target has ", target.num_hidden_layers, " layers, too few for default taps: list the taps"));
  }
}

ModelConfig DFlashConfig::layer_config() const {
  // The serving format's draft layers are Qwen3's (q/k norms, no biases) whatever the
  // target's family; positions are the target's, so its RoPE (scaling included) is kept.
  ModelConfig c = target;
  c.source = source;
  c.family = ModelFamily::qwen3;
  c.num_hidden_layers = num_draft_layers;
  c.num_experts = 0, c.num_experts_per_tok = 0, c.moe_intermediate_size = 0;
  c.mlp_only_layers.clear();
  return c;
}

void DFlashConfig::check_target(const ModelConfig& model) const {
  auto same = [&](const char* key, auto trained, auto other) {
    if (trained == other) return;
    throw ConfigError(cat(source, " is a drafter for a target of ", key, " ", trained, ", but ", model.source, " has ",
                          key, " ", other, ": a drafter runs only against a target of the shape it was trained "
                          "with; use the target it was trained against (or one fine-tuned from it)"));
  };
  same("vocab_size", target.vocab_size, model.vocab_size);
  same("hidden_size", target.hidden_size, model.hidden_size);
  same("num_hidden_layers", target.num_hidden_layers, model.num_hidden_layers);
  same("num_attention_heads", target.num_attention_heads, model.num_attention_heads);
  same("num_key_value_heads", target.num_key_value_heads, model.num_key_value_heads);
  same("head_dim", target.head_dim, model.head_dim);
  same("intermediate_size", target.intermediate_size, model.intermediate_size);
  same("rms_norm_eps", target.rms_norm_eps, model.rms_norm_eps);
  same("RoPE", target.rope_text(), model.rope_text());
}

int64_t count_drafter_parameters(const DFlashConfig& config) {
  const ModelConfig c = config.layer_config();
  const ParameterCounts layers = count_parameters(c);  // plus embeddings and a final norm, which are the target's
  const auto taps = static_cast<int64_t>(config.resolved_taps().size());
  return layers.total - layers.embedding - c.hidden_size + taps * c.hidden_size * c.hidden_size + c.hidden_size;
}

}  // namespace topotrain::model
