// topotrain-export: a training checkpoint as the Hugging Face folder the ecosystem loads. A
// model's checkpoint (any family: config.json names its class) becomes a model directory
// (config.json, model.safetensors or shards with model.safetensors.index.json, HF tensor names
// with one set of weights per expert) that transformers' from_pretrained and load_hf_checkpoint
// read; a DFlash drafter's becomes the folder of the public DFlash drafters (model/dflash_hf.h)
// that serving stacks load beside the target. A model's folder also gets the tokenizer files
// its training data stored (data/tokenizer_files.h) and generation_config.json with the eos,
// bos and pad ids of its config and tokenizer. The shape comes from what the checkpoint stores;
// ones written before checkpoints stored it, and a drafter that no serving stack could run as
// it was trained (a mask token outside the target's vocabulary, a tap of the target's last
// layer), are refused with ConfigError, as is every bad input.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "topotrain/model/config.h"
#include "topotrain/model/dflash_config.h"

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
  model::ModelConfig config;  // the model's, or a drafter's target's
  std::optional<model::DFlashConfig> drafter;  // a DFlash drafter's settings
  torch::ScalarType dtype = torch::kBFloat16;
  std::vector<std::pair<std::string, std::uint64_t>> files;  // path, bytes; config.json last
  std::vector<std::string> notes;  // what the folder lacks that a user may expect, and why
  double seconds = 0;
};

HfExportResult export_hf(const HfExportOptions& options);

// What topotrain-export prints: the checkpoint, the model, every file with its size, the
// total and the time taken; for a drafter also its mask token id, which the serving side's
// tokenizer must hold, and its target_layer_ids with what they read of the target.
std::string describe(const HfExportResult& result);

}  // namespace topotrain
