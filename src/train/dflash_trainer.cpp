#include "topotrain/train/dflash_trainer.h"

#include <algorithm>
#include <thread>

#include "topotrain/core/error.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/dflash_config.h"
#include "topotrain/train/dflash_drafting.h"
#include "topotrain/train/dflash_target.h"
#include "topotrain/train/job_exit.h"
#include "topotrain/train/run_input_checks.h"
#include "topotrain/train/run_setup.h"

namespace topotrain {
const JobSpec& dflash_job() {
  static const JobSpec job{"dflash_train", {"target", "drafter"}, {"target", "drafter"}};
  return job;
}

void check_dflash_inputs(const RunFile& run, const RunConfig& config) {
  // A target keeps at least the taps it sends (and the final hidden state for the KL loss).
  check_run_inputs(run, config, config.model, static_cast<std::int64_t>(config.dflash->resolved_taps().size()) + 1);
}

void train_dflash(JobContext& context) {
  Runtime& runtime = context.runtime;
  const torch::Device device = torch_device(runtime.device());
  const model::DFlashConfig& config = *context.config.dflash;
  // Every rank builds the same target from the same seed (or loads the same weights):
  // targets run it, drafters keep its embedding, final norm and lm_head. Drawing billions
  // of random weights is CPU work, so the node's cores are shared while it runs; training
  // then uses one intra-op thread per rank.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(static_cast<int>(std::max(1u, cores / static_cast<unsigned>(runtime.local_size()))));
  torch::manual_seed(context.config.step.seed);
  model::CausalLM target(config.target);
  load_model_weights(runtime, context.config.weights, *target);
  at::set_num_threads(1);
  const Runtime::Outcome outcome = runtime.role() == "target" ? run_dflash_target(context, target, config, device)
                                                              : run_dflash_drafting(context, target, config, device);
  // Every rank ends here, whatever its role: either all go on (exit 0) or all leave with
  // the code and message of the lowest rank that failed.
  const Runtime::Outcome failure = runtime.first_failure(outcome);
  if (failure.code != 0) throw JobExit(failure.code, failure.message);
}

}  // namespace topotrain
