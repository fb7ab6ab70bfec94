// Building a run's components from its settings: the one place where setting keys are
// mapped onto the small config structs that model/, data/, comm/ and store/ take.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "topotrain/core/run_file.h"
#include "topotrain/core/runtime.h"
#include "topotrain/comm/grad_reducer.h"
#include "topotrain/core/topology.h"
#include "topotrain/data/prefetcher.h"
#include "topotrain/data/step_planner.h"
#include "topotrain/data/token_dataset.h"
#include "topotrain/model/config.h"
#include "topotrain/model/qwen3.h"
#include "topotrain/store/timing_log.h"
#include "topotrain/train/adamw.h"
#include "topotrain/train/lr_schedule.h"
#include "topotrain/train/progress.h"

namespace topotrain {

using NamedParameters = std::vector<std::pair<std::string, torch::Tensor>>;

// A module's trainable parameters by name, in registration order (the order the
// GradReducer buckets and checkpoints follow).
NamedParameters named_parameters_of(const torch::nn::Module& module);

torch::Device torch_device(const Device& device);

// Dense bf16 peak FLOP/s of one device when known (H100/H200: 989 TFLOP/s), else 0.
double peak_flops(const torch::Device& device);

// model.config (an HF config.json) when set, else the model.preset shape; the random
// initialisation's std (initializer_range) is model.init_std, unless model.config gives
// one and model.init_std was left at its default.
model::ModelConfig model_config_from(const Settings& settings);
// model.weights, when set: an HF safetensors checkpoint (directory, file or index), a
// topotrain checkpoint file (step-*.h5, e.g. a moe_train run of the same shape) or a run
// directory (its latest checkpoint). Collective: every rank loads, and a file that does
// not fit ends every rank with JobExit(2) and one message naming the file and tensor.
void load_model_weights(const Runtime& runtime, const Settings& settings, model::Qwen3CausalLMImpl& model);

// model.dtype: auto (bf16 on CUDA, fp32 on CPU), bf16 or fp32.
torch::ScalarType compute_dtype_from(const Settings& settings, const torch::Device& device);
AdamWConfig adamw_config_from(const Settings& settings);
comm::GradReducerConfig grad_reducer_config_from(const Settings& settings);

// data.path, or the demo corpus built with topotrain when unset; a dataset whose vocabulary
// is larger than the model's is refused (ConfigError naming both and the fix). A
// train.token_budget larger than the whole dataset is said (rank 0's log): a micro-batch
// never crosses an epoch boundary, so its steps hold fewer tokens than the budget.
std::shared_ptr<const data::TokenDataset> load_dataset(const Settings& settings, const model::ModelConfig& model);
// What a job checks before it starts (and in --dry-run), cheaply: load_dataset's checks
// from the dataset file's header alone, without reading its tokens; training_length's
// checks of settings that depend on each other; that model.weights names something that
// exists; that one micro-batch of train.token_budget tokens fits the memory of the ranks'
// devices (RAM for CPU ranks, the GPU's memory where this machine has it) at the least:
// `activations_per_token` vectors of the model's hidden size in bf16 per token, a lower
// bound of what the job keeps. Throws ConfigError.
void check_run_inputs(const RunFile& run, const model::ModelConfig& model, std::int64_t activations_per_token);

// log.timings_every, the device's peak FLOP/s and, on CUDA, its NVML sampling; the trainer
// adds its FLOPs per token and extra fields.
TimingLogConfig timing_log_config_from(const Settings& settings, const torch::Device& device);

// checkpoint.dir / (checkpoint.run, or the topology's name).
std::string run_directory(const RunFile& run);
// From now on this process's log lines are also appended to <run directory>/log.txt (the
// directory is created): for the ranks whose lines tell the run's story, rank 0 and a
// pipeline's first drafter.
void log_run_to_file(const RunFile& run);

// Where a training run stands; stored in every checkpoint.
struct TrainingState {
  std::int64_t step = 0;
  std::int64_t tokens = 0;  // global tokens trained so far (the LR schedule's default clock)
  data::DataPosition data;
  // Pipelines (dflash_train): where each target's own sample stream stands, counting only
  // batches a drafter has trained on. Empty for moe_train.
  std::vector<data::DataPosition> streams;
};
TrainingState initial_state(const Settings& settings);

// When to stop, and the LR schedule's clock and length (train.schedule).
enum class ScheduleClock { tokens, steps };
struct TrainingLength {
  std::int64_t max_steps = 0;        // 0: no limit
  std::int64_t stop_tokens = 0;      // 0: no limit (train.max_tokens)
  std::int64_t epochs = 1;           // used when stop_tokens is 0
  std::int64_t planned_tokens = 0;   // max_tokens, or epochs x dataset tokens
  ScheduleClock clock = ScheduleClock::tokens;
  std::int64_t schedule_length = 0;  // planned_tokens (tokens) or max_steps (steps)
  bool done(const TrainingState& state) const;
  // The epoch at which the data ends (data::PackerConfig::end_epoch): `epochs`, or 0 (never)
  // when max_tokens decides.
  std::uint64_t end_epoch() const { return stop_tokens > 0 ? 0 : static_cast<std::uint64_t>(epochs); }
  // Where the LR schedule stands: the global tokens trained or the optimizer steps taken.
  std::int64_t schedule_position(const TrainingState& state) const;
  // "2 epoch(s) or 10 steps, whichever comes first; LR schedule over 10 steps"
  std::string describe() const;
};
// Throws ConfigError for train.schedule = "steps" without train.max_steps.
TrainingLength training_length(const Settings& settings, std::int64_t dataset_tokens);
TrainingLength training_length(const Settings& settings, const data::TokenDataset& dataset);
// train.lr, train.min_lr_ratio and train.warmup over the length's schedule.
LrSchedule lr_schedule_from(const Settings& settings, const TrainingLength& length);
// The progress line of `ranks` ranks on devices like `device` (its peak FLOP/s, CPU or
// not) that train towards `length`; flops_per_token 0 when each step reports its FLOPs.
ProgressConfig progress_config_from(const TrainingLength& length, int ranks, const torch::Device& device,
                                    double flops_per_token);

// The step prefetcher of one data-parallel rank, starting at `position`, over the
// whole sample stream or one of several independent streams (`stream`), which ends after
// train.epochs unless train.max_tokens is set (TrainingLength::end_epoch): the last step
// may be short, its missing micro-batches empty (num_tokens 0).
std::unique_ptr<data::Prefetcher> make_step_prefetcher(std::shared_ptr<const data::TokenDataset> dataset,
                                                       const Settings& settings, std::int64_t token_budget,
                                                       int rank, int world, int grad_accum,
                                                       const data::DataPosition& position,
                                                       const torch::Device& device, data::SampleStream stream = {});

// data::mean_attention_context of the dataset as make_step_prefetcher's packer cuts it
// (token_budget, data.long_samples): the context length attention's FLOPs per token go by.
double attention_context_from(const Settings& settings, const data::TokenDataset& dataset, std::int64_t token_budget);

}  // namespace topotrain
