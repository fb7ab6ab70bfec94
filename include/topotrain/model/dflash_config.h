// Shape and training constants of a DFlash drafter: a few Qwen3 decoder layers that
// predict a block of future tokens at once from the hidden states of a frozen target.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topotrain/model/config.h"

namespace topotrain::model {

enum class DFlashLoss {
  cross_entropy,  // CE against the data's next tokens
  kl,             // KL(target's next-token distribution || drafter's), "verifier logits"
};
std::string to_string(DFlashLoss loss);
DFlashLoss parse_dflash_loss(const std::string& name, const std::string& source);  // "ce" | "kl"

// `n` target layers spread evenly over [1, L - 3] (rounded half to even, as the public
// reimplementations do); a single layer is L / 2. Qwen3-8B (L = 36), n = 5: {1, 9, 17, 25, 33}.
std::vector<int64_t> default_taps(int64_t num_target_layers, int64_t num_draft_layers);
// "1,9,17,25,33": taps as the model.taps setting spells them.
std::string taps_text(const std::vector<int64_t>& taps);

struct DFlashConfig {
  // Names the settings or file this came from in error messages.
  std::string source = "dflash config";

  // The frozen target (any family): hidden, heads, head_dim, vocab, rms eps and RoPE (theta
  // and scaling) are shared with the drafter; the drafter's MLP width is
  // target.intermediate_size.
  ModelConfig target;
  int64_t num_draft_layers = 5;
  int64_t block_size = 16;           // B: the anchor token, then B - 1 mask tokens
  std::vector<int64_t> taps;         // target layers whose outputs feed fc; empty = default_taps
  int64_t mask_token_id = -1;        // token whose embedding fills slots 1..B-1; must be set
  double gamma = 7.0;                // loss weight of slot k is exp(-(k - 1) / gamma)
  int64_t max_anchors = 512;         // per document, resampled every step
  DFlashLoss loss = DFlashLoss::cross_entropy;
  int64_t loss_chunk_rows = 4096;    // rows of fp32 [rows, vocab] logits alive at once

  // Throws ConfigError naming `source` and the field.
  void validate() const;
  // taps, or default_taps(target layers, num_draft_layers) when taps is empty.
  std::vector<int64_t> resolved_taps() const;
  // A dense Qwen3 config of num_draft_layers layers with the target's attention shape and
  // RoPE, whatever the target's family.
  ModelConfig layer_config() const;
  // A drafter built for `target` runs against `model` only if `model` has the same
  // vocabulary, hidden size, layers (the taps index them), attention shape, MLP width (the
  // drafter's own), norm eps and RoPE; the rest (positions, ties, token ids) may differ.
  // Throws ConfigError naming both sources and the first field that differs.
  void check_target(const ModelConfig& model) const;
};

// Trainable parameters of the drafter (fc, hidden_norm, decoder layers); the frozen
// embedding, final norm and lm_head are not counted.
int64_t count_drafter_parameters(const DFlashConfig& config);

}  // namespace topotrain::model
