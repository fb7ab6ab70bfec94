// Test helper: a DFlash drafter over a target small enough for CPU unit tests (8 target
// layers of width 32, a vocabulary of 64, 2 draft layers, blocks of 4, loss chunks of 5
// rows so that every test walks several), for tests to adjust.
#pragma once

#include "topotrain/model/dflash_config.h"

namespace topotrain::test_support {

inline model::DFlashConfig tiny_dflash_config(model::DFlashLoss loss = model::DFlashLoss::cross_entropy) {
  model::DFlashConfig c;
  c.source = "test";
  c.target = model::ModelConfig::preset("tiny-dense");
  c.target.vocab_size = 64, c.target.hidden_size = 32, c.target.intermediate_size = 64;
  c.target.num_hidden_layers = 8, c.target.num_attention_heads = 4, c.target.num_key_value_heads = 2;
  c.target.head_dim = 8, c.target.initializer_range = 0.2;
  c.num_draft_layers = 2, c.block_size = 4, c.gamma = 2.0, c.mask_token_id = 63, c.max_anchors = 8;
  c.loss = loss;
  c.loss_chunk_rows = 5;
  return c;
}

}  // namespace topotrain::test_support
