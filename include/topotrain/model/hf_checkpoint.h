// HF-format import and export of a Qwen3CausalLM: tensor names as on the Hub, MoE experts
// unstacked into mlp.experts.N.{gate,up,down}_proj.weight.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "topotrain/model/qwen3.h"
#include "topotrain/model/safetensors.h"

namespace topotrain::model {

// Every HF tensor of the model with a view into the parameter that holds it (a slice of
// the stacked experts, or the whole parameter).
NamedTensors hf_tensor_views(Qwen3CausalLMImpl& model);

// Loads a checkpoint (file, index or directory) into the model's parameters. F32, BF16
// and F16 tensors are accepted (the upcast to the fp32 masters is exact). Throws
// ConfigError naming the checkpoint file and tensor on a missing tensor, an unexpected
// tensor, a shape or dtype mismatch; lm_head.weight is ignored when embeddings are tied
// (HF ties it to the embedding the same way).
void load_hf_checkpoint(Qwen3CausalLMImpl& model, const std::string& path);

// Writes config.json and the weights in `dtype` (kFloat32 or kBFloat16) to `directory`,
// sharded above max_shard_bytes, in the layout load_hf_checkpoint and transformers read.
void save_hf_checkpoint(Qwen3CausalLMImpl& model, const std::string& directory,
                        torch::ScalarType dtype = torch::kFloat32, int64_t max_shard_bytes = int64_t{5} << 30);

}  // namespace topotrain::model
