// Building a run's components from its typed configuration (run_config.h): the model's
// weights, the dataset, the step prefetcher, the timing log and the progress line. Nothing
// here reads a setting. The checks made before a job starts are run_input_checks.h's; the
// training length and LR schedule lr_schedule.h's; where a run stands training_state.h's.
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
#include "topotrain/model/causal_lm.h"
#include "topotrain/store/timing_log.h"
#include "topotrain/train/adamw.h"
#include "topotrain/train/lr_schedule.h"
#include "topotrain/train/progress.h"
#include "topotrain/train/run_config.h"

namespace topotrain {

using NamedParameters = std::vector<std::pair<std::string, torch::Tensor>>;

// A module's trainable parameters by name, in registration order (the order the
// GradReducer buckets and checkpoints follow).
NamedParameters named_parameters_of(const torch::nn::Module& module);

torch::Device torch_device(const Device& device);

// Dense bf16 peak FLOP/s of one device when known (H100/H200: 989 TFLOP/s), else 0.
double peak_flops(const torch::Device& device);

// `weights` (model.weights), when not empty: an HF safetensors checkpoint (directory, file or index), a
// topotrain checkpoint file (step-*.h5, e.g. a moe_train run of the same shape) or a run
// directory (its latest checkpoint), as trained_models.h's load_target_weights takes them (a
// DFlash drafter is refused, pointing to where drafters go). Collective: every rank loads, and
// a file that does not fit ends every rank with JobExit(2) and one message naming the file and
// tensor.
void load_model_weights(const Runtime& runtime, const std::string& weights, model::CausalLMImpl& model);

// model.dtype on `device`: auto is bf16 on CUDA, fp32 on CPU.
torch::ScalarType compute_dtype(DtypeChoice choice, const torch::Device& device);

// The documents a run trains on and those it evaluates on: config.data.path's, less the
// data.eval_fraction held out (held_out then has them), or with data.eval_path's file as
// held_out; no held_out without either. A dataset whose vocabulary is larger than the
// model's is refused (ConfigError naming both and the fix). A train.token_budget larger
// than the whole training set is said (rank 0's log): a micro-batch never crosses an epoch
// boundary, so its steps hold fewer tokens than the budget.
struct TrainingData {
  std::shared_ptr<const data::TokenDataset> train, held_out;
};
TrainingData load_training_data(const RunConfig& config);

// log.timings_every, the device's peak FLOP/s and, on CUDA, its NVML sampling; the trainer
// adds its FLOPs per token and extra fields.
TimingLogConfig timing_log_config(const Cadences& cadences, const torch::Device& device);
// Collective over the world, where every rank opens its timing log: the log of `config`,
// its device_group found among the world's ranks (comm::DeviceSharers) on a GPU.
std::unique_ptr<TimingLog> open_timing_log(const std::string& run_dir, const Runtime& runtime,
                                           const torch::Device& device, TimingLogConfig config);

// From now on this process's log lines are also appended to <run_dir>/log.txt (the
// directory is created): for the ranks whose lines tell the run's story, rank 0 and a
// pipeline's first drafter.
void log_run_to_file(const std::string& run_dir);

// The progress line of `ranks` ranks on devices like `device` (its peak FLOP/s, CPU or
// not) that train towards `length`; flops_per_token 0 when each step reports its FLOPs.
ProgressConfig progress_config_from(const TrainingLength& length, int ranks, const torch::Device& device,
                                    double flops_per_token);

// The step prefetcher of one data-parallel rank, starting at `position`, over the
// whole sample stream or one of several independent streams (`stream`), which ends after
// train.epochs unless train.max_tokens is set (TrainingLength::end_epoch): the last step
// may be short, its missing micro-batches empty (num_tokens 0).
std::unique_ptr<data::Prefetcher> make_step_prefetcher(std::shared_ptr<const data::TokenDataset> dataset,
                                                       const RunConfig& config, std::int64_t token_budget,
                                                       int rank, int world, int grad_accum,
                                                       const data::DataPosition& position,
                                                       const torch::Device& device, data::SampleStream stream = {});

// data::mean_attention_context of the dataset as make_step_prefetcher's packer cuts it
// (token_budget, data.long_samples): the context length attention's FLOPs per token go by.
double attention_context(const DataConfig& config, const data::TokenDataset& dataset, std::int64_t token_budget);

}  // namespace topotrain
