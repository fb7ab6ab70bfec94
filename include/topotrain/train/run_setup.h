// Building a run's components from its typed configuration (run_config.h): the model's
// weights, the dataset, the step prefetcher, the timing log's config, the training length
// and where a run stands. Nothing here reads a setting but check_run_inputs, which names
// where a value it refuses was set.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
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
void load_model_weights(const Runtime& runtime, const std::string& weights, model::Qwen3CausalLMImpl& model);

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
// What a job checks before it starts (and in --dry-run), cheaply: load_training_data's checks
// from the dataset files' headers alone (data.eval_path's too), without reading their tokens; that model.weights
// names something that
// exists; that one micro-batch of train.token_budget tokens fits the memory of the ranks'
// devices (RAM for CPU ranks, the GPU's memory where this machine has it) at the least:
// `activations_per_token` vectors of the model's hidden size in bf16 per token, a lower
// bound of what the job keeps. Throws ConfigError.
void check_run_inputs(const RunFile& run, const RunConfig& config, const model::ModelConfig& model,
                      std::int64_t activations_per_token);

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

// What identifies the training set that a data position indexes. A position counts samples
// of a permutation drawn over the set's documents, so another set of as many documents (another
// file, the same file edited, another held-out draw) would silently skip or repeat samples.
// Empty: not known (a fresh state, a checkpoint of an older topotrain, or a DFlash drafter
// that read only the dataset's header).
struct TrainingSetIdentity {
  std::optional<std::int64_t> documents;
  std::optional<std::int64_t> tokens;
  std::optional<std::int64_t> lengths_crc;  // CRC-32C of the documents' lengths, in order
  // CRC-32C of the tokens of the file the set was read from (TokenDataset::file_tokens_crc32c),
  // computed from the tokens read, not taken from the file's attribute: the same lengths with
  // other tokens are another set, also where the file's stored checksum was rewritten or dropped.
  std::optional<std::int64_t> tokens_crc;
  std::string path;                         // the data.path it was read from, for messages
  // The tokenizer files the set's dataset file stores (tokenizer_files.h), which checkpoints
  // record for topotrain-export; null where it stores none. Shared: states are copied.
  std::shared_ptr<const data::TokenizerFiles> tokenizer_files;
};

// TokenDataset::stored_tokenizer_files of `path`, null when it stores none or is no file.
std::shared_ptr<const data::TokenizerFiles> stored_tokenizer_files(const std::string& path);
// The identity of `train`, the documents of `path` a run trains on (less any held out), and
// the tokenizer files `path` stores.
TrainingSetIdentity training_set_identity(const data::TokenDataset& train, const std::string& path);

// Where a training run stands; stored in every checkpoint.
struct TrainingState {
  std::int64_t step = 0;
  std::int64_t tokens = 0;  // global tokens trained so far (the LR schedule's default clock)
  data::DataPosition data;
  // Pipelines (dflash_train): where each target's own sample stream stands, counting only
  // batches a drafter has trained on. Empty for moe_train.
  std::vector<data::DataPosition> streams;
  // The training set the data position counts in; unknown parts are not compared.
  TrainingSetIdentity data_set;
  // What train.token_budget = "auto" measured at this launch, kept in checkpoints for the
  // record; a resume measures again and does not read it. Budget 0: a fixed budget.
  struct BudgetRecord {
    std::int64_t budget = 0;
    double bytes_per_token = 0;
  };
  BudgetRecord measured_budget;
};
// A fresh run's state: step 0, the data at the start of epoch 0 of the sample order `seed` draws.
TrainingState initial_state(std::uint64_t seed);

// A resumed state's data position indexes the training set it was trained on: a launch
// whose set differs in what both identities know (another data.path, the file edited in
// place, another data.eval_fraction, or another train.seed drawing other held-out
// documents) would silently skip or repeat samples. Throws ConfigError naming both sets and
// the fix; then records what `mine` knows.
void adopt_training_set(TrainingState& state, const TrainingSetIdentity& mine, const RunConfig& config);

// When to stop, and the LR schedule's length (train.schedule).
//
// With train.schedule = "run" the schedule ends where the run does, as HF Trainer's does
// with max_steps: each limit is measured on its own clock, steps for max_steps and tokens
// for max_tokens or the epochs (epochs x the dataset's tokens), and at every step the
// schedule follows the limit the run is furthest towards, so it reaches its floor at the
// limit that ends the run. No step count is predicted: how many steps max_tokens or the
// epochs take depends on packing, and a resume may change token_budget, grad_accum or the
// ranks (and a shrink after an out-of-memory the budget); the fractions stay exact.
struct SchedulePoint {
  std::int64_t position = 0;  // steps taken or tokens trained
  std::int64_t length = 0;    // in the same unit; 0: a constant LR
};
struct TrainingLength {
  std::int64_t max_steps = 0;        // 0: no limit
  std::int64_t stop_tokens = 0;      // 0: no limit (train.max_tokens)
  std::int64_t epochs = 1;           // used when stop_tokens is 0
  std::int64_t dataset_tokens = 0;   // of the training set
  std::int64_t planned_tokens = 0;   // max_tokens, or epochs x dataset tokens
  ScheduleLength schedule = ScheduleLength::run;
  bool done(const TrainingState& state) const;
  // The epoch at which the data ends (data::PackerConfig::end_epoch): `epochs`, or 0 (never)
  // when max_tokens decides.
  std::uint64_t end_epoch() const { return stop_tokens > 0 ? 0 : static_cast<std::uint64_t>(epochs); }
  // Where the LR schedule stands at `state`, on the clock of the limit it follows there.
  SchedulePoint schedule_point(const TrainingState& state) const;
  // "2 epoch(s) or 10 steps, whichever comes first; LR schedule over the run: 10 steps, or
  // 3000 tokens if they come first"
  std::string describe() const;
  // The LR schedule's part of describe(): "over 3000 tokens".
  std::string describe_schedule() const;
};
TrainingLength training_length(const LengthConfig& config, std::int64_t dataset_tokens);
// The learning rate of the step after `state` (warmup, then cosine to the floor at the
// schedule's length: lr_schedule.h).
double learning_rate(const LrConfig& config, const TrainingLength& length, const TrainingState& state);
// A resumed launch whose LR schedule differs from the one its checkpoint was trained on
// (another train.max_steps, train.epochs, train.schedule, train.lr, ...; `saved`: the
// checkpoint's settings): "LR at step 10: 2.00e-04 under the checkpoint's schedule (over 10
// steps) -> 1.10e-03 now (over 20 steps)". Empty when the LR at `state` is the same.
std::string schedule_change(const Settings& saved, const RunConfig& now, const TrainingLength& length,
                            const TrainingState& state);
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
