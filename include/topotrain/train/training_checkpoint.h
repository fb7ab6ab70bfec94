// A training run's checkpoint: model parameters ("model/<name>"), AdamW state
// ("optim/exp_avg/<name>", "optim/exp_avg_sq/<name>"), and the TrainingState (step,
// tokens, data position) plus the resolved settings and topology as text.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "topotrain/core/run_file.h"
#include "topotrain/model/config.h"
#include "topotrain/store/checkpoint_state.h"
#include "topotrain/train/adamw.h"
#include "topotrain/train/run_setup.h"

namespace topotrain {

CheckpointState snapshot(const RunFile& run, const std::string& model_name, const NamedParameters& parameters,
                         const AdamW& optimizer, const TrainingState& state);

CheckpointExpectations expectations_for(const std::string& model_name, const NamedParameters& parameters,
                                        const AdamW& optimizer);

// Copies the checkpoint into the live parameters, optimizer and state.
void restore(const CheckpointState& checkpoint, const NamedParameters& parameters, AdamW& optimizer,
             TrainingState& state);

}  // namespace topotrain
