// What topotrain-speculate does once its target and drafter are loaded: checks that the pair
// (DFlashConfig::check_target) and the prompts fit together, places both models on the device
// in the compute dtype, decodes every prompt with plain greedy decoding and with DFlash
// speculation, then once more with the trivial drafter (constant_proposer.h: the greedy
// responses' most frequent token in every slot), and summarises (speculation_report.h).
//
// Stop tokens are those given, the prompt dataset's eos_id and end of turn (prompt_set.h) and
// the target config's eos ids.
// On CUDA the first prompt is decoded once both ways before timing, so that CUDA's start-up
// and the kernels' first-shape costs do not count against either.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "topotrain/infer/prompt_set.h"
#include "topotrain/infer/speculation_report.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/dflash_drafter.h"

namespace topotrain::infer {

struct SpeculationOptions {
  std::string target, drafter, prompts;  // the paths the models and prompts came from
  std::string device;                    // "cpu", "cuda" or "cuda:N"; empty: cuda where present
  std::string dtype = "auto";            // auto (bf16 on CUDA, fp32 on CPU), bf16 or fp32
  int64_t max_new_tokens = 128;
  std::vector<int64_t> stop_tokens;      // besides the eos ids found
};

// Where the models run: the device and compute dtype the options name. ConfigError for a
// device this machine lacks or a name it does not know, so a tool can check before loading.
struct Placement {
  torch::Device device;
  torch::ScalarType dtype;
};
Placement resolve_placement(const SpeculationOptions& options);

// The tokens that end a response: options.stop_tokens, the prompts' eos_id and end of turn and
// the target config's eos ids, sorted, once each.
std::vector<int64_t> stop_tokens(const model::ModelConfig& target, const PromptSet& prompts,
                                 const SpeculationOptions& options);

// Called after each prompt: prompts done, of `total`, and the seconds since the first.
using SpeculationProgress = std::function<void(int64_t done, int64_t total, double seconds)>;

SpeculationReport run_speculation(model::CausalLMImpl& target, model::DFlashDrafterImpl& drafter,
                                  const PromptSet& prompts, const SpeculationOptions& options,
                                  const Placement& placement, const SpeculationProgress& progress = {});

}  // namespace topotrain::infer
