// What a job checks before it starts (and in --dry-run), cheaply, from the dataset files'
// headers and the machine: the checks that need more than the settings (run_config.h makes
// those). Each throws ConfigError naming the value, where it was set and the fix.
#pragma once

#include <cstdint>
#include <string>

#include "topotrain/core/run_file.h"
#include "topotrain/data/token_dataset.h"
#include "topotrain/model/config.h"
#include "topotrain/train/run_config.h"

namespace topotrain {

// A dataset whose vocabulary is larger than the model's is refused: past the embedding table
// a CPU run stops in an index error and a GPU run in a device-side assert, neither naming the
// dataset or the model.
void check_vocabulary(const std::string& path, const data::TokenDatasetHeader& header,
                      const model::ModelConfig& model);

// load_training_data's checks (run_setup.h) from the dataset files' headers alone
// (data.eval_path's too), without reading their tokens; that model.weights names something
// that exists; that one micro-batch of train.token_budget tokens fits the memory of the
// ranks' devices (RAM for CPU ranks, the GPU's memory where this machine has it) at the
// least: `activations_per_token` vectors of the model's hidden size in bf16 per token, a
// lower bound of what the job keeps.
void check_run_inputs(const RunFile& run, const RunConfig& config, const model::ModelConfig& model,
                      std::int64_t activations_per_token);

}  // namespace topotrain
