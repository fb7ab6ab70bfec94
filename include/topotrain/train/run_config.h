// A run's settings read once, before the job starts, into the typed configs of the parts
// that use them. read_run_config is the one place where setting keys are mapped
// (check_run_inputs also names where a value it refuses was set); the job machinery,
// trainers, the training session and run_setup's builders
// take these structs and read no setting themselves, so a setting a part does not take
// cannot reach it, and every key of the schema is consumed here (tested).
//
// Every check that needs only the settings is made here, on every rank (ConfigError
// naming the key and the fix); checks that need the dataset or the device are
// check_run_inputs' (run_input_checks.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "topotrain/comm/grad_reducer.h"
#include "topotrain/core/log.h"
#include "topotrain/core/run_file.h"
#include "topotrain/data/token_budget_packer.h"
#include "topotrain/model/config.h"
#include "topotrain/model/dflash_config.h"
#include "topotrain/model/moe.h"
#include "topotrain/train/adamw.h"
#include "topotrain/train/step_profile.h"

namespace topotrain {

// What the LR schedule's length is (train.schedule): the run's (whichever of max_steps,
// max_tokens and the epochs ends it first, each on its own clock), or, as before "run"
// existed, the tokens of max_tokens or the epochs (max_steps then only stops the run early,
// for a later launch to go on with the same schedule), or max_steps.
enum class ScheduleLength { run, tokens, steps };
struct LengthConfig {
  std::int64_t max_steps = 0;   // train.max_steps; 0: no limit
  std::int64_t max_tokens = 0;  // train.max_tokens; 0: no limit (train.epochs decides)
  std::int64_t epochs = 1;      // train.epochs
  ScheduleLength schedule = ScheduleLength::run;
};

struct LrConfig {
  double peak = 0;       // train.lr
  double min_ratio = 0;  // train.min_lr_ratio
  double warmup = 0;     // train.warmup, a fraction of the schedule's length
};

struct DataConfig {
  std::string path;  // data.path, or the demo corpus built with topotrain
  data::LongSamplePolicy long_samples = data::LongSamplePolicy::split;  // data.long_samples
  std::size_t prefetch = 0;                                             // data.prefetch
  // Held-out documents: a file, or a fraction of `path`; at most one is set.
  std::string eval_path;     // data.eval_path; empty: none
  double eval_fraction = 0;  // data.eval_fraction; 0: none
  bool has_eval() const { return !eval_path.empty() || eval_fraction > 0; }
};

// The smallest micro-batch: a token and its next-token target. The settings schema's floor
// for train.token_budget; shrinking after an out-of-memory error stops above it.
constexpr std::int64_t kMinTokenBudget = 2;

// What one optimizer step is made of, and what a step does when it fails.
struct StepConfig {
  std::int64_t token_budget = 0;  // train.token_budget: tokens per micro-batch; 0 with auto_budget
  // train.token_budget = "auto" (moe_train): each launch measures the budget (budget_probe.h)
  // within memory_fraction of memory_limit.
  bool auto_budget = false;
  double memory_fraction = 0;     // train.memory_fraction
  std::int64_t memory_limit = 0;  // train.memory_limit in bytes; 0: the device's capacity
  int grad_accum = 1;             // train.grad_accum: micro-batches per step (>= 1)
  double clip = 0;                // train.clip: global gradient-norm clip; 0: off
  bool skip_nonfinite = false;    // train.skip_nonfinite
  bool shrink_on_oom = false;     // train.oom = "shrink" (else "fail")
  double hang_timeout_s = 0;      // train.hang_timeout_s; 0: no watchdog
  std::uint64_t seed = 0;         // train.seed
};

// How often a run reports and saves.
struct Cadences {
  std::int64_t log_every = 1;          // log.every: the progress line
  std::int64_t checkpoint_every = 0;   // checkpoint.every_steps: -1 never, 0 only at the end
  std::int64_t checkpoint_keep = 0;    // checkpoint.keep
  bool checkpoint_pinned = true;       // checkpoint.pinned
  int timings_every = 1;               // log.timings_every: rows shipped to rank 0 every N steps
  ProfileRequest profile;              // log.profile_step, log.profile_steps, log.profile_host
  bool log_samples = false;            // log.samples
  std::int64_t eval_every = 0;         // train.eval_every: held-out evaluation every N steps; 0: after the last only
  std::int64_t eval_speculate = 0;     // train.eval_speculate: held-out prompts a drafter's evaluation decodes
  bool tensorboard = false;            // log.tensorboard: the lead's TensorBoard event files
};

// model.dtype: the compute dtype on a device (auto: bf16 on CUDA, fp32 on CPU).
enum class DtypeChoice { auto_, bf16, fp32 };

// The defaults of the schema (settings_schema.cpp) are the only defaults: read_run_config
// sets every field.
struct RunConfig {
  std::string run_dir;  // checkpoint.dir / (checkpoint.run, or the topology's name)
  model::ModelConfig model;
  std::optional<model::DFlashConfig> dflash;  // dflash_train's drafter (its target is `model`)
  std::string weights;                        // model.weights; empty: random initialisation
  std::string draft_weights;                  // model.draft_weights (dflash_train); empty: a random drafter
  DtypeChoice dtype = DtypeChoice::auto_;
  model::ExpertLayout expert_layout = model::ExpertLayout::busiest_first;  // model.expert_layout (moe_train)
  DataConfig data;
  LengthConfig length;
  LrConfig lr;
  AdamWConfig adamw;
  comm::GradReducerConfig reducer;
  StepConfig step;
  Cadences cadences;
  LogLevel log_level = LogLevel::info;  // log.level
  bool log_all_ranks = false;           // log.all_ranks
};

// `job`: the job's name (dflash_train reads the drafter's keys). Throws ConfigError.
RunConfig read_run_config(const RunFile& run, const std::string& job);

// The pieces read_run_config is made of, for tests of one mapping.
// model.config (an HF config.json) when set, else the model.preset shape; the random
// initialisation's std (initializer_range) is model.init_std, unless model.config gives
// one and model.init_std was left at its default.
model::ModelConfig model_config_from(const Settings& settings);
// Throws ConfigError for train.schedule = "steps" without train.max_steps.
LengthConfig length_config_from(const Settings& settings);
LrConfig lr_config_from(const Settings& settings);

}  // namespace topotrain
