#include "topotrain/train/run_setup.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/log.h"
#include "topotrain/core/process_memory.h"
#include "topotrain/model/hf_checkpoint.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/torch_compat.h"
#include "topotrain/train/job_exit.h"
#include "topotrain/train/training_checkpoint.h"

#ifndef TOPOTRAIN_DEMO_DATASET
#error "CMake defines TOPOTRAIN_DEMO_DATASET: the demo corpus built with topotrain"
#endif

namespace topotrain {
namespace {

// "1.2 s" from `start` to now, for the log lines of slow setup steps.
std::string seconds_since(std::chrono::steady_clock::time_point start) {
  return fixed_point(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1) + " s";
}

}  // namespace

NamedParameters named_parameters_of(const torch::nn::Module& module) {
  NamedParameters parameters;
  for (const auto& item : module.named_parameters()) parameters.emplace_back(item.key(), item.value());
  return parameters;
}

torch::Device torch_device(const Device& device) {
  return device.is_cpu ? torch::Device(torch::kCPU) : torch::Device(torch::kCUDA, device.index);
}

double peak_flops(const torch::Device& device) {
  if (!device.is_cuda()) return 0;
  const std::string name = compat::device_name(device);
  for (const char* hopper : {"H100", "H200", "GH200"})
    if (name.find(hopper) != std::string::npos) return 989.4e12;
  if (name.find("A100") != std::string::npos) return 312e12;
  return 0;
}

TimingLogConfig timing_log_config_from(const Settings& settings, const torch::Device& device) {
  TimingLogConfig config;
  config.gather_every = static_cast<int>(settings.integer("log.timings_every"));
  config.peak_flops = peak_flops(device);
  config.nvml_device = device.is_cuda() ? device.index() : -1;
  return config;
}

namespace {

// A topotrain checkpoint in model.weights gives the shape unless model.preset was set
// (load_model_weights then refuses a checkpoint of another model, naming both). A
// checkpoint that cannot be read gives nothing here: load_model_weights reads it again and
// reports that on every rank at once, which an exception here could not.
std::optional<model::ModelConfig> config_of_weights(const Settings& settings) {
  if (!settings.has("model.weights") || settings.origin("model.preset") != "default") return std::nullopt;
  const std::string& weights = settings.string("model.weights");
  try {
    if (auto checkpoint = CheckpointReader::checkpoint_at(weights)) {
      if (auto stored = stored_model_config(*checkpoint, CheckpointReader::load_header(*checkpoint))) return stored;
      log_info(cat("model.weights = \"", weights, "\": ", *checkpoint, " stores no model config (written by an "
                   "older topotrain); building model.preset '", settings.string("model.preset"),
                   "' (set model.preset or model.config to the model it holds)"));
    }
  } catch (const ConfigError&) {
    // reported by load_model_weights, collectively (see above)
  }
  return std::nullopt;
}

}  // namespace

model::ModelConfig model_config_from(const Settings& settings) {
  const double init_std = settings.real("model.init_std");
  if (settings.has("model.config")) {
    model::ModelConfig config = model::ModelConfig::from_json_file(settings.string("model.config"));
    // As HF: a config.json's initializer_range is the model's, unless the run sets its own.
    if (settings.origin("model.init_std") != "default") config.initializer_range = init_std;
    return config;
  }
  if (auto stored = config_of_weights(settings)) return *stored;  // trained weights: their own init is moot
  model::ModelConfig config = model::ModelConfig::preset(settings.string("model.preset"));
  config.initializer_range = init_std;
  return config;
}

namespace {

void load_weights_file(model::Qwen3CausalLMImpl& model, const std::string& path) {
  const auto checkpoint = CheckpointReader::checkpoint_at(path);
  if (!checkpoint) {
    model::load_hf_checkpoint(model, path);
    return;
  }
  const auto stored = stored_model_config(*checkpoint, CheckpointReader::load_header(*checkpoint));
  if (stored && !stored->same_model(model.config()))
    throw ConfigError(cat("checkpoint ", *checkpoint, " holds a model trained as ", stored->source,
                          ", but this run builds ", model.config().source, ": leave model.preset and model.config "
                          "unset to build the checkpoint's model, or set them to the model it holds"));
  load_model_tensors(*checkpoint, named_parameters_of(model));
}

}  // namespace

void load_model_weights(const Runtime& runtime, const Settings& settings, model::Qwen3CausalLMImpl& model) {
  if (!settings.has("model.weights")) return;
  const auto started = std::chrono::steady_clock::now();
  std::string error;
  try {
    load_weights_file(model, settings.string("model.weights"));
  } catch (const ConfigError& e) {
    error = e.what();
  }
  error = runtime.first_error(error);
  if (!error.empty()) throw JobExit(2, cat("model.weights: ", error));
  log_info(cat("weights loaded from ", settings.string("model.weights"), " in ", seconds_since(started)));
}

torch::ScalarType compute_dtype_from(const Settings& settings, const torch::Device& device) {
  const std::string& dtype = settings.string("model.dtype");
  if (dtype == "auto") return device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
  if (dtype == "bf16") return torch::kBFloat16;
  if (dtype == "fp32") return torch::kFloat32;
  throw ConfigError(cat("model.dtype = \"", dtype, "\": use auto, bf16 or fp32"));
}

AdamWConfig adamw_config_from(const Settings& settings) {
  return AdamWConfig{settings.real("train.beta1"), settings.real("train.beta2"), settings.real("train.eps"),
                     settings.real("train.weight_decay")};
}

comm::GradReducerConfig grad_reducer_config_from(const Settings& settings) {
  comm::GradReducerConfig config;
  config.bucket_mb = settings.real("train.bucket_mb");
  return config;
}

namespace {

std::string dataset_path(const Settings& settings) {
  return settings.has("data.path") ? settings.string("data.path") : TOPOTRAIN_DEMO_DATASET;
}

// Past the embedding table a CPU run stops in an index error and a GPU run in a
// device-side assert, neither naming the dataset or the model.
void check_vocabulary(const std::string& path, const data::TokenDatasetHeader& header,
                      const model::ModelConfig& model) {
  if (header.vocab_size <= static_cast<std::uint64_t>(model.vocab_size)) return;
  throw ConfigError(cat("dataset '", path, "' has vocab_size ", header.vocab_size, " (tokenizer ", header.tokenizer,
                        ") but the model (", model.source, ") embeds only vocab_size ", model.vocab_size,
                        " ids: train a model whose vocab_size is at least ", header.vocab_size,
                        " (model.preset or model.config) or re-tokenize the corpus with the model's tokenizer "
                        "(topotrain-prepare)"));
}

// The memory one rank of `role` can hold, and what it is called; 0 where unknown (a GPU
// this machine lacks).
std::pair<std::int64_t, std::string> rank_memory(const Topology& topology, const RoleSpec& role) {
  if (role.all_cpu || topology.interconnect == Interconnect::cpu) return {physical_memory_bytes(), "this machine's RAM"};
  const int index = role.devices.empty() ? 0 : role.devices.front().index;
  return {compat::device_total_bytes(index), cat("GPU ", index, "'s memory")};
}

// Lower bound: a budget it refuses cannot run; one it passes may still run out of memory
// (train.oom says what happens then).
void check_token_budget(const RunFile& run, const model::ModelConfig& model, std::int64_t activations_per_token) {
  const Settings& settings = run.settings;
  const std::int64_t budget = settings.integer("train.token_budget");
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

void check_run_inputs(const RunFile& run, const model::ModelConfig& model, std::int64_t activations_per_token) {
  const Settings& settings = run.settings;
  const std::string path = dataset_path(settings);
  const data::TokenDatasetHeader header = data::TokenDataset::read_header(path);
  check_vocabulary(path, header, model);
  training_length(settings, static_cast<std::int64_t>(header.num_tokens));  // its checks of several settings
  check_token_budget(run, model, activations_per_token);
  if (settings.has("model.weights") && !file_exists(settings.string("model.weights")))
    throw ConfigError(cat("model.weights = \"", settings.string("model.weights"),
                          "\": no such file or directory (", settings.origin("model.weights"), ")"));
}

std::shared_ptr<const data::TokenDataset> load_dataset(const Settings& settings, const model::ModelConfig& model) {
  const std::string path = dataset_path(settings);
  const auto started = std::chrono::steady_clock::now();
  auto dataset = std::make_shared<const data::TokenDataset>(data::TokenDataset::load(path));
  check_vocabulary(path, {dataset->vocab_size(), dataset->eos_id(), dataset->tokenizer(), dataset->num_tokens()},
                   model);
  log_info(cat("dataset ", path, ": ", dataset->num_samples(), " documents, ", dataset->num_tokens(),
               " tokens, loaded in ", seconds_since(started)));
  const std::int64_t budget = settings.integer("train.token_budget");
  if (static_cast<std::uint64_t>(budget) > dataset->num_tokens())
    log_info(cat("train.token_budget = ", budget, " is larger than the whole dataset (", dataset->num_tokens(),
                 " tokens): a micro-batch holds at most one pass over the data, so micro-batches hold fewer "
                 "tokens than the budget; a smaller budget and more train.grad_accum use the memory better"));
  return dataset;
}

std::string run_directory(const RunFile& run) {
  const Settings& s = run.settings;
  return s.string("checkpoint.dir") + "/" + (s.has("checkpoint.run") ? s.string("checkpoint.run") : run.topology.name);
}

void log_run_to_file(const RunFile& run) {
  const std::string run_dir = run_directory(run);
  make_directories(run_dir);
  log_to_file(join_path(run_dir, "log.txt"));
}

TrainingState initial_state(const Settings& settings) {
  TrainingState state;
  state.data.seed = static_cast<std::uint64_t>(settings.integer("train.seed"));
  return state;
}

bool TrainingLength::done(const TrainingState& state) const {
  if (max_steps > 0 && state.step >= max_steps) return true;
  if (stop_tokens > 0) return state.tokens >= stop_tokens;
  return static_cast<std::int64_t>(state.data.epoch) >= epochs;
}

std::int64_t TrainingLength::schedule_position(const TrainingState& state) const {
  return clock == ScheduleClock::steps ? state.step : state.tokens;
}

std::string TrainingLength::describe() const {
  std::string what = stop_tokens > 0 ? cat(stop_tokens, " tokens") : cat(epochs, " epoch(s)");
  if (max_steps > 0) what += cat(" or ", max_steps, " steps, whichever comes first");
  return what + cat("; LR schedule over ", schedule_length, clock == ScheduleClock::steps ? " steps" : " tokens");
}

TrainingLength training_length(const Settings& settings, std::int64_t dataset_tokens) {
  TrainingLength length;
  length.max_steps = settings.integer("train.max_steps");
  length.stop_tokens = settings.integer("train.max_tokens");
  length.epochs = settings.integer("train.epochs");
  length.planned_tokens = length.stop_tokens > 0 ? length.stop_tokens : length.epochs * dataset_tokens;
  if (settings.string("train.schedule") == "steps") {
    if (length.max_steps == 0)
      throw ConfigError(cat("train.schedule = \"steps\" (", settings.origin("train.schedule"),
                            ") needs the schedule's length: set train.max_steps > 0, or use train.schedule = "
                            "\"tokens\""));
    length.clock = ScheduleClock::steps;
    length.schedule_length = length.max_steps;
  } else {
    length.schedule_length = length.planned_tokens;
  }
  return length;
}

TrainingLength training_length(const Settings& settings, const data::TokenDataset& dataset) {
  return training_length(settings, static_cast<std::int64_t>(dataset.num_tokens()));
}

LrSchedule lr_schedule_from(const Settings& settings, const TrainingLength& length) {
  return LrSchedule{settings.real("train.lr"), settings.real("train.min_lr_ratio"), settings.real("train.warmup"),
                    length.schedule_length};
}

ProgressConfig progress_config_from(const TrainingLength& length, int ranks, const torch::Device& device,
                                    double flops_per_token) {
  ProgressConfig config;
  config.ranks = ranks;
  config.cpu = device.is_cpu();
  config.flops_per_token = flops_per_token;
  config.peak_flops = peak_flops(device);
  config.planned_tokens = length.planned_tokens;
  config.max_steps = length.max_steps;
  return config;
}

namespace {

data::LongSamplePolicy long_samples_from(const Settings& settings) {
  return data::parse_long_sample_policy(settings.string("data.long_samples"));
}

}  // namespace

std::unique_ptr<data::Prefetcher> make_step_prefetcher(std::shared_ptr<const data::TokenDataset> dataset,
                                                       const Settings& settings, std::int64_t token_budget,
                                                       int rank, int world, int grad_accum,
                                                       const data::DataPosition& position,
                                                       const torch::Device& device, data::SampleStream stream) {
  data::PackerConfig packing;
  packing.token_budget = static_cast<std::uint64_t>(token_budget);
  packing.long_samples = long_samples_from(settings);
  packing.pin_memory = device.is_cuda();
  packing.stream = stream;
  packing.end_epoch = training_length(settings, *dataset).end_epoch();
  auto planner = std::make_shared<data::StepPlanner>(std::move(dataset), packing,
                                                     data::DataParallelConfig{world, rank, grad_accum}, position);
  data::PrefetchConfig prefetch;
  prefetch.depth = static_cast<std::size_t>(settings.integer("data.prefetch"));
  prefetch.device = device;
  return std::make_unique<data::Prefetcher>([planner] { return planner->next_step(); }, prefetch);
}

double attention_context_from(const Settings& settings, const data::TokenDataset& dataset, std::int64_t token_budget) {
  return data::mean_attention_context(dataset, static_cast<std::uint64_t>(token_budget), long_samples_from(settings));
}

}  // namespace topotrain
