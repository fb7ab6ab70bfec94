#include "topotrain/infer/speculation_run.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include "topotrain/core/error.h"
#include "topotrain/infer/constant_proposer.h"
#include "topotrain/infer/dflash_proposer.h"

namespace topotrain::infer {
namespace {

torch::Device resolve_device(const std::string& name) {
  if (name.empty()) return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const bool known = name == "cpu" || name == "cuda" || name.rfind("cuda:", 0) == 0;
  std::optional<torch::Device> device;
  if (known) {
    try {
      device = torch::Device(name);
    } catch (const c10::Error&) {
    }
  }
  if (!device) throw ConfigError(cat("--device '", name, "' is not cpu, cuda or cuda:N"));
  if (device->is_cuda()) {
    const auto count = static_cast<int64_t>(torch::cuda::device_count());
    const int64_t index = device->has_index() ? device->index() : 0;
    if (index >= count) {
      throw ConfigError(cat("--device ", name, ": this machine has ", count, " GPUs visible to torch; use --device cpu",
                            count > 0 ? cat(" or cuda:0..", count - 1) : std::string()));
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  return *device;
}

torch::ScalarType resolve_dtype(const std::string& name, const torch::Device& device) {
  if (name == "auto") return model::default_compute_dtype(device);
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp32") return torch::kFloat32;
  throw ConfigError(cat("--dtype '", name, "' is not auto, bf16 or fp32"));
}

std::string dtype_name(torch::ScalarType dtype) { return dtype == torch::kBFloat16 ? "bf16" : "fp32"; }

}  // namespace

std::vector<int64_t> stop_tokens(const model::ModelConfig& target, const PromptSet& prompts,
                                 const SpeculationOptions& options) {
  std::vector<int64_t> stops = options.stop_tokens;
  if (prompts.eos_id) stops.push_back(*prompts.eos_id);
  if (prompts.end_of_turn) stops.push_back(*prompts.end_of_turn);
  const std::vector<int64_t> eos = target.eos_token_ids();
  stops.insert(stops.end(), eos.begin(), eos.end());
  std::sort(stops.begin(), stops.end());
  stops.erase(std::unique(stops.begin(), stops.end()), stops.end());
  return stops;
}

Placement resolve_placement(const SpeculationOptions& options) {
  const torch::Device device = resolve_device(options.device);
  return {device, resolve_dtype(options.dtype, device)};
}

SpeculationReport run_speculation(model::CausalLMImpl& target, model::DFlashDrafterImpl& drafter,
                                  const PromptSet& prompts, const SpeculationOptions& options,
                                  const Placement& placement, const SpeculationProgress& progress) {
  if (options.max_new_tokens < 1) {
    throw ConfigError(cat("--max-new-tokens must be >= 1, got ", options.max_new_tokens));
  }
  drafter.config().check_target(target.config());
  check_prompt_vocabulary(prompts, target.config().vocab_size, cat("'", options.target, "'"));
  const torch::Device& device = placement.device;
  const torch::ScalarType dtype = placement.dtype;
  torch::NoGradGuard no_grad;
  target.to(device);
  target.set_compute_dtype(dtype);
  drafter.to(device);
  drafter.set_compute_dtype(dtype);

  DecodeOptions decode;
  decode.max_new_tokens = options.max_new_tokens;
  decode.stop_tokens = stop_tokens(target.config(), prompts, options);
  CachedTarget plain(target, {}), tapped(target, drafter.taps());
  DFlashProposer proposer(drafter);
  if (device.is_cuda()) {
    DecodeOptions warm_up = decode;
    warm_up.max_new_tokens = std::min<int64_t>(decode.max_new_tokens, 2 * drafter.config().block_size);
    greedy_decode(plain, prompts.prompts.front().tokens, warm_up);
    speculative_decode(tapped, proposer, prompts.prompts.front().tokens, warm_up);
  }

  const auto start = std::chrono::steady_clock::now();
  std::vector<PromptOutcome> outcomes;
  for (const Prompt& prompt : prompts.prompts) {
    PromptOutcome o;
    o.prompt_tokens = static_cast<int64_t>(prompt.tokens.size());
    o.greedy = greedy_decode(plain, prompt.tokens, decode);
    o.speculative = speculative_decode(tapped, proposer, prompt.tokens, decode);
    outcomes.push_back(std::move(o));
    if (progress) {
      progress(static_cast<int64_t>(outcomes.size()), static_cast<int64_t>(prompts.prompts.size()),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  // The trivial drafter: the token the greedy responses hold most often, in every slot.
  std::map<int64_t, int64_t> counts;
  for (const PromptOutcome& o : outcomes)
    for (int64_t token : o.greedy.tokens) ++counts[token];
  SpeculationSetup setup;
  if (!counts.empty()) {
    setup.trivial_token = std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
                            return a.second < b.second;
                          })->first;
    ConstantProposer trivial(drafter.config().block_size, setup.trivial_token);
    for (std::size_t p = 0; p < outcomes.size(); ++p)
      outcomes[p].trivial = speculative_decode(tapped, trivial, prompts.prompts[p].tokens, decode);
  }
  setup.target = options.target;
  setup.drafter = options.drafter;
  setup.prompts = options.prompts;
  setup.device = device.str();
  setup.dtype = dtype_name(dtype);
  setup.max_new_tokens = decode.max_new_tokens;
  setup.stop_tokens = decode.stop_tokens;
  setup.taps = drafter.taps();
  return summarize(outcomes, setup, drafter.config().block_size);
}

}  // namespace topotrain::infer
