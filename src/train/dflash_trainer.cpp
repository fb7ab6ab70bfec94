#include "topotrain/train/dflash_trainer.h"

#include <algorithm>
#include <sstream>
#include <thread>

#include "topotrain/core/error.h"
#include "topotrain/model/dflash_config.h"
#include "topotrain/model/qwen3.h"
#include "topotrain/train/dflash_drafting.h"
#include "topotrain/train/dflash_target.h"
#include "topotrain/train/job_exit.h"
#include "topotrain/train/run_setup.h"

namespace topotrain {
namespace {

model::DFlashConfig dflash_config_from(const Settings& settings) {
  model::DFlashConfig config;
  config.source = "settings";
  config.target = model_config_from(settings);
  config.num_draft_layers = settings.integer("model.draft_layers");
  config.block_size = settings.integer("model.block_size");
  if (settings.has("model.taps")) {
    std::stringstream list(settings.string("model.taps"));
    std::string item;
    while (std::getline(list, item, ',')) {
      try {
        config.taps.push_back(std::stoll(item));
      } catch (const std::exception&) {
        throw ConfigError(cat("model.taps = \"", settings.string("model.taps"),
                              "\": expected target layer numbers separated by commas, e.g. \"1,9,17\""));
      }
    }
  }
  const std::int64_t mask = settings.integer("model.mask_token_id");
  // The last id of the vocabulary is unused by the byte tokenizer and by Qwen's padding
  // rows, so it serves as the mask token unless one is named.
  config.mask_token_id = mask >= 0 ? mask : config.target.vocab_size - 1;
  config.gamma = settings.real("train.gamma");
  config.max_anchors = settings.integer("train.anchors");
  config.loss = model::parse_dflash_loss(settings.string("train.loss"), "train.loss");
  config.validate();
  return config;
}

}  // namespace

void check_dflash_inputs(const RunFile& run) {
  // A target keeps at least the taps it sends (and the final hidden state for the KL loss).
  const model::DFlashConfig config = dflash_config_from(run.settings);
  check_run_inputs(run, config.target, static_cast<std::int64_t>(config.resolved_taps().size()) + 1);
}

void train_dflash(JobContext& context) {
  Runtime& runtime = context.runtime;
  const Settings& settings = context.run.settings;
  const torch::Device device = torch_device(runtime.device());
  const model::DFlashConfig config = dflash_config_from(settings);
  // Every rank builds the same target from the same seed (or loads the same weights):
  // targets run it, drafters keep its embedding, final norm and lm_head. Drawing billions
  // of random weights is CPU work, so the node's cores are shared while it runs; training
  // then uses one intra-op thread per rank.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(static_cast<int>(std::max(1u, cores / static_cast<unsigned>(runtime.local_size()))));
  torch::manual_seed(static_cast<std::uint64_t>(settings.integer("train.seed")));
  model::Qwen3CausalLM target(config.target);
  load_model_weights(runtime, settings, *target);
  at::set_num_threads(1);
  const Runtime::Outcome outcome = runtime.role() == "target" ? run_dflash_target(context, target, config, device)
                                                              : run_dflash_drafting(context, target, config, device);
  // Every rank ends here, whatever its role: either all go on (exit 0) or all leave with
  // the code and message of the lowest rank that failed.
  const Runtime::Outcome failure = runtime.first_failure(outcome);
  if (failure.code != 0) throw JobExit(failure.code, failure.message);
}

}  // namespace topotrain
