// The models training leaves, loaded back from wherever a path names one: a target (a Qwen3 or
// Qwen3-MoE model: a Hugging Face folder of config.json and safetensors, a topotrain
// checkpoint step-*.h5 or its run directory) and a DFlash drafter (a folder topotrain-export
// wrote, model/dflash_hf.h; a drafter checkpoint or its run directory). dflash_train's
// model.weights and model.draft_weights, topotrain-export and the speculative decoder take
// their models here, so that each kind of path means the same everywhere.
//
// Bad input is a ConfigError (exit 2 in tools) naming the path and the fix: a missing path,
// one without a config, a drafter named as a target or a model named as a drafter (each said
// to be what it is), a drafter whose target has another shape.
#pragma once

#include <string>

#include "topotrain/model/causal_lm.h"
#include "topotrain/model/config.h"
#include "topotrain/model/dflash_config.h"
#include "topotrain/model/dflash_drafter.h"

namespace topotrain {

// The model a target path holds: a checkpoint's stored config (source: what it was trained
// from), or the folder's config.json with the eos ids of its generation_config.json where it
// has one, so that a decoder stops where transformers' generate on the folder stops.
model::ModelConfig target_config_at(const std::string& path);
// Copies the weights at `path` (an HF safetensors file, index or folder, a topotrain
// checkpoint or run directory) into `model`; a checkpoint of another model is refused naming
// both.
void load_target_weights(const std::string& path, model::CausalLMImpl& model);
// A target built from target_config_at(path) with its weights: fp32 on the CPU.
model::CausalLM load_target_model(const std::string& path);

// The drafter a drafter path holds (DFlashConfig::source names the file). Its `target` is the
// target it was trained against, as far as the path tells (check_target against the real one).
model::DFlashConfig drafter_config_at(const std::string& path);
// Copies the drafter weights at `path` into `drafter`, built from drafter_config_at(path): its
// parameters and its final norm. A drafter checkpoint written before checkpoints stored that
// norm leaves the drafter's (the target's, from load_target_tensors) as it is.
void load_drafter_weights(const std::string& path, model::DFlashDrafterImpl& drafter);
// A drafter for `target`: drafter_config_at(path) checked against target's shape, built with
// target's config, the target's embedding and lm_head, and the weights and final norm at
// `path` (the norm a drafter applies before the target's lm_head is its own in the public
// format; topotrain's drafters store their target's). fp32 on the CPU.
model::DFlashDrafter load_drafter_model(const std::string& path, model::CausalLMImpl& target);

}  // namespace topotrain
