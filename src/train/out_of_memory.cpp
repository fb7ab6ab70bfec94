#include "topotrain/train/out_of_memory.h"

#include <c10/util/Exception.h>

#include "topotrain/core/error.h"
#include "topotrain/core/fault_injection.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/train/budget_probe.h"

namespace topotrain {

bool is_out_of_memory(const std::exception& error) {
  return dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr;
}

std::optional<std::int64_t> shrunk_budget(const StepConfig& step, std::int64_t token_budget,
                                          const MeasuredBudget* measured, std::int64_t failing_peak_bytes) {
  if (!step.shrink_on_oom) return std::nullopt;
  if (measured) return measured->after_out_of_memory(token_budget, failing_peak_bytes);  // keeps its own floor
  if (token_budget / 2 < kMinTokenBudget) return std::nullopt;
  return token_budget / 2;
}

std::string shrink_cause(const StepConfig& step) {
  return step.auto_budget ? "train.token_budget = \"auto\"" : "train.oom = \"shrink\"";
}

void fault_inject_out_of_memory(int rank, std::int64_t step) {
  if (fault_injected("TOPOTRAIN_FAULT_OOM", rank, step))
    throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)},
                                "CUDA out of memory (injected by TOPOTRAIN_FAULT_OOM)");
}

std::string out_of_memory_message(const JobContext& context, int rank, std::int64_t step,
                                  std::int64_t token_budget, std::int64_t peak_bytes, const std::string& run_dir) {
  std::string command = cat("mpirun -np ", context.runtime.world_size(), " ", context.job.name, " ",
                            context.options.topology_path);
  for (const auto& config : context.options.config_paths) command += " --config " + config;
  for (const auto& assignment : context.options.overrides)
    if (assignment.rfind("train.token_budget=", 0) != 0) command += " --set " + assignment;
  // The session saves the last good step as it ends, unless checkpoints are off: then, with no
  // earlier checkpoint, --resume auto would be refused beside the steps this launch recorded
  // (train/run_directory.h), and the run starts over.
  const bool checkpointed =
      context.config.cadences.checkpoint_every >= 0 || !CheckpointReader::list(run_dir).empty();
  command += cat(" --set train.token_budget=", std::max(kMinTokenBudget, token_budget / 2),
                 checkpointed ? " --resume auto" : " --resume fresh");
  return cat("out of memory on rank ", rank, " at step ", step, " with train.token_budget = ", token_budget,
             " (peak allocated ", static_cast<double>(peak_bytes) / (1 << 30), " GiB).\n",
             checkpointed ? cat("The last checkpoint in ", run_dir, " is intact; resume with half the budget:\n  ")
                          : cat("checkpoint.every_steps = -1 left no checkpoint in ", run_dir,
                                " to resume; start over with half the budget:\n  "),
             command,
             read_by_job(*find_setting("train.oom"), context.job.name)
                 ? "\n(or set train.oom = \"shrink\" to halve the budget in-process)"
                 : "");
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace topotrain
