// topotrain-export: a Qwen3 / Qwen3-MoE training checkpoint as a Hugging Face model
// directory (config.json, model.safetensors or shards with model.safetensors.index.json,
// HF tensor names with one set of weights per expert) that transformers' from_pretrained
// and load_hf_checkpoint read. The model's shape comes from the config the checkpoint
// stores; checkpoints of other models (a DFlash drafter) and ones written before
// checkpoints stored their config are refused with ConfigError, as is every bad input.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "topotrain/model/config.h"

namespace topotrain {

struct HfExportOptions {
  std::string source;   // a checkpoint file (step-*.h5) or a run directory (its newest complete one)
  std::string out_dir;  // created when missing
  torch::ScalarType dtype = torch::kBFloat16;  // kBFloat16 or kFloat32
  double max_shard_gib = 5;
  // Replace an earlier export in a non-empty out_dir: its config.json, *.safetensors and
  // index are deleted first, other files (a tokenizer, say) are kept.
  bool force = false;
};

struct HfExportResult {
  std::string checkpoint;  // the file exported
  std::int64_t step = 0;
  model::ModelConfig config;
  torch::ScalarType dtype = torch::kBFloat16;
  std::vector<std::pair<std::string, std::uint64_t>> files;  // path, bytes; config.json last
  double seconds = 0;
};

HfExportResult export_hf(const HfExportOptions& options);

// What topotrain-export prints: the checkpoint, the model, every file with its size, the
// total and the time taken.
std::string describe(const HfExportResult& result);

}  // namespace topotrain
