// The Hugging Face folder of a DFlash drafter: the layout the public DFlash drafters ship and
// serving stacks load as a draft model beside their target (SGLang's `--speculative-algorithm
// DFLASH`, vLLM's dflash method, the DFlash authors' transformers code).
//
// * config.json: architectures ["DFlashDraftModel"], model_type qwen3 with the Qwen3 keys of
//   the draft layers (num_hidden_layers = the draft layers; attention shape, MLP width,
//   vocabulary, norm eps, rope and token ids are the target's), layer_types (all
//   full_attention), num_target_layers, block_size, and dflash_config {mask_token_id,
//   target_layer_ids}.
// * safetensors (model.safetensors, or shards with their index): fc.weight [H, taps * H],
//   hidden_norm.weight [H], norm.weight [H] (the final norm applied before the target's
//   lm_head) and layers.N.* under DFlashDrafterImpl's parameter names. No embedding and no
//   lm_head: the target's are used.
//
// target_layer_ids[i] is the output of the target's decoder layer i, 0-based, which the public
// code reads as HF's hidden_states[i + 1]: exactly what the drafter's taps are
// (CausalLMImpl::forward_backbone), so they are written as they are.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "topotrain/model/dflash_config.h"
#include "topotrain/model/dflash_drafter.h"

namespace topotrain::model {

// config.json's architectures entry of a DFlash drafter.
inline constexpr const char* kDFlashArchitecture = "DFlashDraftModel";

// `path` (a folder, or a safetensors file or index in one) has a config.json of a DFlash
// drafter beside it.
bool is_dflash_hf_folder(const std::string& path);

// The config.json of `config`'s drafter for weights stored in `dtype` ("float32", "bfloat16"):
// the Qwen3 keys as ModelConfig writes them for the draft layers, plus the DFlash keys.
std::string dflash_config_json(const DFlashConfig& config, const std::string& dtype);

// Writes `drafter`'s folder in `dtype` (kFloat32 or kBFloat16), sharded above
// max_shard_bytes; its norm.weight is the drafter's final norm (target_norm). Returns the
// paths written, config.json last.
std::vector<std::string> save_dflash_hf(DFlashDrafterImpl& drafter, const std::string& directory,
                                        torch::ScalarType dtype, int64_t max_shard_bytes);

// The drafter that the config.json of the folder `path` (or of the folder of a safetensors
// file or index) describes. Its `target` is the target as far as the folder knows it: the
// draft layers' Qwen3 keys with num_hidden_layers = num_target_layers, dense: check the real
// target against it (DFlashConfig::check_target) before putting that in its place. Taps are
// target_layer_ids, or default_taps where the folder lists none (as the public code does).
// ConfigError naming the file and key: no config.json, another architecture (a Qwen3 model's
// folder is said to be a model, not a drafter), a DFlash key missing or of the wrong type, a
// variant topotrain's drafter does not have (sliding-window layers, other dflash_config keys).
DFlashConfig read_dflash_hf_config(const std::string& path);

// Loads the folder's tensors into `drafter`, built from its config: every tensor of the folder
// is one of the drafter's, with its shape, in F32, BF16 or F16 (ConfigError naming the file and
// tensor otherwise); norm.weight becomes its final norm (target_norm), the embedding and
// lm_head stay as loaded from the target.
void load_dflash_hf(DFlashDrafterImpl& drafter, const std::string& path);

}  // namespace topotrain::model
