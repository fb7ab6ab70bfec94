// What a checkpoint holds: named tensors plus metadata maps that trainers extend
// freely. Tensor names are paths: "model/<hf name>", "optim/exp_avg/<name>",
// "rng/cpu". Each tensor is stored in its own dtype (bf16 stays bf16, fp32 stays fp32).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace topotrain {

struct CheckpointState {
  std::int64_t step = 0;
  std::map<std::string, at::Tensor> tensors;
  // e.g. consumed_samples, consumed_tokens, sampler_seed, epoch, lr_step
  std::map<std::string, std::int64_t> ints;
  std::map<std::string, double> reals;
  std::map<std::string, std::string> texts;  // keys without '/'
  std::string settings_toml;   // the resolved run settings
  std::string topology_text;   // the topology file as run
  std::string model_identity;  // model_identity(): resuming another model is refused
  // The model's HF config.json text and where it came from ("model preset 'tiny-moe'", a
  // config.json path), so that the weights can be used without naming the model again; a
  // DFlash drafter's checkpoint holds its target's. Empty in checkpoints written before
  // topotrain stored them.
  std::string model_config_json;
  std::string model_config_source;
  // The Hugging Face tokenizer files (name -> text) of the training set, as its dataset file
  // stores them (data/tokenizer_files.h), so that an export carries its tokenizer; empty for
  // byte-tokenized data and in older checkpoints.
  std::map<std::string, std::string> tokenizer_files;
};

// "<preset>/<hash of every tensor's name, shape and dtype>": two models with the same
// preset name but different shapes (a changed setting) get different identities.
std::string model_identity(const std::string& preset, const std::map<std::string, at::Tensor>& parameters);

// What a resume needs from a checkpoint. Tensors in the file that are not listed are
// loaded but not checked.
struct TensorExpectation {
  std::vector<std::int64_t> shape;
  at::ScalarType dtype;
};

struct CheckpointExpectations {
  std::string model_identity;  // empty: not checked
  std::map<std::string, TensorExpectation> tensors;

  // Expect every tensor of `tensors` with its current shape and dtype.
  void expect_like(const std::map<std::string, at::Tensor>& tensors);
};

// "float32", "bfloat16", ... (the names stored in checkpoint files).
std::string dtype_name(at::ScalarType type);

}  // namespace topotrain
