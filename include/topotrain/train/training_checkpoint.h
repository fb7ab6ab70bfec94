// A training run's checkpoint: model parameters ("model/<name>"), AdamW state
// ("optim/exp_avg/<name>", "optim/exp_avg_sq/<name>"), and the TrainingState (step,
// tokens, data position) plus the resolved settings and topology as text; a model's
// checkpoint also its config.json, so that its weights are usable without naming the model,
// and a DFlash drafter's its target's config.json, its DFlash settings and its frozen final
// norm, so that the drafter can be rebuilt and exported from the checkpoint alone.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "topotrain/core/run_file.h"
#include "topotrain/model/config.h"
#include "topotrain/model/dflash_drafter.h"
#include "topotrain/store/checkpoint_state.h"
#include "topotrain/train/adamw.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/training_state.h"

namespace topotrain {

// The model name of DFlash drafter checkpoints: the prefix of their model identity.
constexpr const char* kDFlashDrafterModel = "dflash-drafter";

// A Qwen3 model's checkpoint: its identity is named after model.source, and its config is stored.
CheckpointState snapshot(const RunFile& run, const model::ModelConfig& model, const NamedParameters& parameters,
                         const AdamW& optimizer, const TrainingState& state);
// A checkpoint of a model named only, which nothing can rebuild from it (as drafters were
// checkpointed before they stored their settings).
CheckpointState snapshot(const RunFile& run, const std::string& model_name, const NamedParameters& parameters,
                         const AdamW& optimizer, const TrainingState& state);
// A DFlash drafter's checkpoint, named kDFlashDrafterModel: its target's config as
// model_config_json, its DFlash settings as "dflash_*" metadata (stored_drafter_config reads
// them back) and its final norm, the target's frozen one, as "frozen/target_norm". That tensor
// is not a parameter: a resume neither expects nor restores it, so drafter checkpoints written
// before it existed resume as they did.
CheckpointState snapshot(const RunFile& run, const model::DFlashDrafterImpl& drafter,
                         const NamedParameters& parameters, const AdamW& optimizer, const TrainingState& state);

// The checkpoint of `header` (CheckpointReader::load_header) holds a DFlash drafter.
bool holds_drafter(const CheckpointState& header);

// The model config that checkpoint `path` (its header, CheckpointReader::load_header)
// stores, with the source it was trained from; nullopt when it stores none. ConfigError
// names the file when the stored text does not parse.
std::optional<model::ModelConfig> stored_model_config(const std::string& path, const CheckpointState& header);

// The drafter a drafter checkpoint `path` (its header) stores, its source naming the file;
// nullopt for a checkpoint of another model and for a drafter checkpoint written before they
// stored their settings. Not validated (building the drafter does that). ConfigError names the
// file when what is stored is incomplete or does not parse.
std::optional<model::DFlashConfig> stored_drafter_config(const std::string& path, const CheckpointState& header);

// Copies the model tensors of checkpoint `path` into `parameters` (the optimizer state is
// not read); ConfigError names the file and the tensor that is missing or of another shape.
void load_model_tensors(const std::string& path, const NamedParameters& parameters);
// load_model_tensors of a drafter checkpoint into `drafter`'s parameters, and its stored final
// norm into the drafter's; one written before checkpoints stored it leaves that norm as it is.
// Returns whether the checkpoint stored the norm.
bool load_drafter_tensors(const std::string& path, model::DFlashDrafterImpl& drafter);

CheckpointExpectations expectations_for(const std::string& model_name, const NamedParameters& parameters,
                                        const AdamW& optimizer);

// Copies the checkpoint into the live parameters, optimizer and state.
void restore(const CheckpointState& checkpoint, const NamedParameters& parameters, AdamW& optimizer,
             TrainingState& state);

}  // namespace topotrain
