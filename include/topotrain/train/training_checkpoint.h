// A training run's checkpoint: model parameters ("model/<name>"), AdamW state
// ("optim/exp_avg/<name>", "optim/exp_avg_sq/<name>"), and the TrainingState (step,
// tokens, data position) plus the resolved settings and topology as text; a Qwen3 model's
// checkpoint also its config.json, so that its weights are usable without naming the model.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "topotrain/core/run_file.h"
#include "topotrain/model/config.h"
#include "topotrain/store/checkpoint_state.h"
#include "topotrain/train/adamw.h"
#include "topotrain/train/run_setup.h"

namespace topotrain {

// The model name of DFlash drafter checkpoints: the prefix of their model identity.
constexpr const char* kDFlashDrafterModel = "dflash-drafter";

// The tensors a checkpoint holds: "model/<name>" and "optim/<AdamW state name>".
std::map<std::string, at::Tensor> checkpoint_tensors(const NamedParameters& parameters, const AdamW& optimizer);

// A Qwen3 model's checkpoint: its identity is named after model.source, and its config is stored.
CheckpointState snapshot(const RunFile& run, const model::ModelConfig& model, const NamedParameters& parameters,
                         const AdamW& optimizer, const TrainingState& state);
// A checkpoint of a model that is not a Qwen3CausalLM (the DFlash drafter): named only.
CheckpointState snapshot(const RunFile& run, const std::string& model_name, const NamedParameters& parameters,
                         const AdamW& optimizer, const TrainingState& state);

// The model config that checkpoint `path` (its header, CheckpointReader::load_header)
// stores, with the source it was trained from; nullopt when it stores none. ConfigError
// names the file when the stored text does not parse.
std::optional<model::ModelConfig> stored_model_config(const std::string& path, const CheckpointState& header);

// Copies the model tensors of checkpoint `path` into `parameters` (the optimizer state is
// not read); ConfigError names the file and the tensor that is missing or of another shape.
void load_model_tensors(const std::string& path, const NamedParameters& parameters);

CheckpointExpectations expectations_for(const std::string& model_name, const NamedParameters& parameters,
                                        const AdamW& optimizer);

// Copies the checkpoint into the live parameters, optimizer and state.
void restore(const CheckpointState& checkpoint, const NamedParameters& parameters, AdamW& optimizer,
             TrainingState& state);

}  // namespace topotrain
