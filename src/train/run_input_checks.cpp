#include "topotrain/train/run_input_checks.h"

#include <utility>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/log.h"
#include "topotrain/core/process_memory.h"
#include "topotrain/torch_compat.h"

namespace topotrain {

void check_vocabulary(const std::string& path, const data::TokenDatasetHeader& header,
                      const model::ModelConfig& model) {
  if (header.vocab_size <= static_cast<std::uint64_t>(model.vocab_size)) return;
  throw ConfigError(cat("dataset '", path, "' has vocab_size ", header.vocab_size, " (tokenizer ", header.tokenizer,
                        ") but the model (", model.source, ") embeds only vocab_size ", model.vocab_size,
                        " ids: train a model whose vocab_size is at least ", header.vocab_size,
                        " (model.preset or model.config) or re-tokenize the corpus with the model's tokenizer "
                        "(topotrain-prepare)"));
}

namespace {

// The memory one rank of `role` can hold, and what it is called; 0 where unknown (a GPU
// this machine lacks).
std::pair<std::int64_t, std::string> rank_memory(const Topology& topology, const RoleSpec& role) {
  if (role.all_cpu || topology.interconnect == Interconnect::cpu) return {physical_memory_bytes(), "this machine's RAM"};
  const int index = role.devices.empty() ? 0 : role.devices.front().index;
  return {compat::device_total_bytes(index), cat("GPU ", index, "'s memory")};
}

// Lower bound: a budget it refuses cannot run; one it passes may still run out of memory
// (train.oom says what happens then).
void check_token_budget(const RunFile& run, std::int64_t budget, const model::ModelConfig& model,
                        std::int64_t activations_per_token) {
  const Settings& settings = run.settings;
  const double per_token = 2.0 * static_cast<double>(model.hidden_size) * static_cast<double>(activations_per_token);
  const double needed = per_token * static_cast<double>(budget);
  for (const RoleSpec& role : run.topology.roles) {
    const auto [memory, what] = rank_memory(run.topology, role);
    if (memory <= 0 || needed <= static_cast<double>(memory)) continue;
    const auto fits = static_cast<std::int64_t>(static_cast<double>(memory) / per_token);
    throw ConfigError(cat("train.token_budget = ", budget, " (", settings.origin("train.token_budget"),
                          ") cannot fit a ", role.role, " rank: one micro-batch keeps at least ",
                          fixed_point(needed / double(1 << 30), 1), " GiB of activations (", activations_per_token,
                          " vectors of ", model.hidden_size, " bf16 values per token, ", model.source,
                          "), more than the ", fixed_point(static_cast<double>(memory) / double(1 << 30), 1),
                          " GiB of ", what, ": use a train.token_budget below ", fits,
                          " and raise train.grad_accum to keep the tokens per step"));
  }
}

}  // namespace

void check_run_inputs(const RunFile& run, const RunConfig& config, const model::ModelConfig& model,
                      std::int64_t activations_per_token) {
  const std::string& path = config.data.path;
  check_vocabulary(path, data::TokenDataset::read_header(path), model);
  if (!config.data.eval_path.empty())
    check_vocabulary(config.data.eval_path, data::TokenDataset::read_header(config.data.eval_path), model);
  // An automatic budget is measured on the device instead (budget_probe.h).
  if (!config.step.auto_budget) check_token_budget(run, config.step.token_budget, model, activations_per_token);
  if (!config.weights.empty() && !file_exists(config.weights))
    throw ConfigError(cat("model.weights = \"", config.weights, "\": no such file or directory (",
                          run.settings.origin("model.weights"), ")"));
}

}  // namespace topotrain
