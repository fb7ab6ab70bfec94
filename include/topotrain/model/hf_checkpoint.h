// HF-format import and export: a model folder of config.json and safetensors (one file, or
// shards with model.safetensors.index.json) whose tensors are a model's by name. The
// CausalLM layout has the tensor names of the Hub, MoE experts unstacked into
// mlp.experts.N.{gate,up,down}_proj.weight; the DFlash drafter's is model/dflash_hf.h's.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "topotrain/model/causal_lm.h"
#include "topotrain/model/safetensors.h"

namespace topotrain::model {

// Maps tensors named and shaped like the model's parameters (the parameters themselves,
// or their gradients) to HF names: each stacked expert tensor becomes per-expert views.
NamedTensors to_hf_layout(const NamedTensors& stacked);
// to_hf_layout of the model's parameters: views that share their storage.
NamedTensors hf_tensor_views(CausalLMImpl& model);

// Loads the tensors of a checkpoint (file, index or directory) into `views`, the tensors of
// a model by their names in the checkpoint. Every view must be there with its shape, in F32,
// BF16 or F16 (the upcast to fp32 masters is exact); every tensor of the checkpoint must be a
// view's or be named in `ignored`. ConfigError names the file and the tensor otherwise.
void load_hf_tensors(const std::string& path, const NamedTensors& views, const std::set<std::string>& ignored = {});

// Writes `views` in `dtype` (kFloat32 or kBFloat16) to `directory`, sharded above
// max_shard_bytes, and config.json holding `config_json`. Returns the paths written,
// config.json last.
std::vector<std::string> save_hf_tensors(const std::string& directory, const NamedTensors& views,
                                         const std::string& config_json, torch::ScalarType dtype,
                                         int64_t max_shard_bytes);
// HF's name of a weight dtype in config.json: "float32" or "bfloat16".
std::string hf_dtype_name(torch::ScalarType dtype);

// Loads a checkpoint (file, index or directory) into the model's parameters. F32, BF16
// and F16 tensors are accepted (the upcast to the fp32 masters is exact). Throws
// ConfigError naming the checkpoint file and tensor on a missing tensor, an unexpected
// tensor, a shape or dtype mismatch; lm_head.weight is ignored when embeddings are tied
// (HF ties it to the embedding the same way).
void load_hf_checkpoint(CausalLMImpl& model, const std::string& path);

// Writes config.json and the weights in `dtype` (kFloat32 or kBFloat16) to `directory`,
// sharded above max_shard_bytes, in the layout load_hf_checkpoint and transformers read.
// Returns the paths written, config.json last.
std::vector<std::string> save_hf_checkpoint(CausalLMImpl& model, const std::string& directory,
                                            torch::ScalarType dtype = torch::kFloat32,
                                            int64_t max_shard_bytes = int64_t{5} << 30);

}  // namespace topotrain::model
