#include "topotrain/train/run_setup.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "topotrain/comm/device_sharers.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/log.h"
#include "topotrain/core/process_memory.h"
#include "topotrain/data/held_out_split.h"
#include "topotrain/core/crc32c.h"
#include "topotrain/store/run_dir_files.h"
#include "topotrain/torch_compat.h"
#include "topotrain/train/job_exit.h"
#include "topotrain/train/trained_models.h"

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

TimingLogConfig timing_log_config(const Cadences& cadences, const torch::Device& device) {
  TimingLogConfig config;
  config.gather_every = cadences.timings_every;
  config.peak_flops = peak_flops(device);
  config.nvml_device = device.is_cuda() ? device.index() : -1;
  return config;
}

std::unique_ptr<TimingLog> open_timing_log(const std::string& run_dir, const Runtime& runtime,
                                           const torch::Device& device, TimingLogConfig config) {
  const comm::DeviceSharers sharers(runtime.world(), device);
  // CPU ranks share their node's memory, not a device whose FLOPs they split.
  config.device_group = device.is_cuda() ? sharers.group_ranks().front() : -1;
  if (device.is_cuda() && sharers.size() > 1 && sharers.rank() == 0) {
    std::string ranks;
    for (int rank : sharers.group_ranks()) ranks += cat(ranks.empty() ? "" : ", ", rank);
    log_info_here(cat("ranks ", ranks, " share one GPU (", compat::device_bus_id(device.index()),
                      "): each rank's MFU (progress lines, topotrain-report's roles) counts its own FLOPs over steps in "
                      "which the GPU also ran the others' work; the report's \"one GPU shared\" line adds them up"));
  }
  return std::make_unique<TimingLog>(run_dir, runtime.world(), runtime.role(), std::move(config));
}

void load_model_weights(const Runtime& runtime, const std::string& weights, model::Qwen3CausalLMImpl& model) {
  if (weights.empty()) return;
  const auto started = std::chrono::steady_clock::now();
  std::string error;
  try {
    load_target_weights(weights, model);
  } catch (const ConfigError& e) {
    error = e.what();
  }
  error = runtime.first_error(error);
  if (!error.empty()) throw JobExit(2, cat("model.weights: ", error));
  log_info(cat("weights loaded from ", weights, " in ", seconds_since(started)));
}

torch::ScalarType compute_dtype(DtypeChoice choice, const torch::Device& device) {
  switch (choice) {
    case DtypeChoice::bf16: return torch::kBFloat16;
    case DtypeChoice::fp32: return torch::kFloat32;
    case DtypeChoice::auto_: break;
  }
  return device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
}

namespace {

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

namespace {

// Positions past the model's max_position_embeddings train rotary angles that its config
// does not claim (an exported config.json still says that number): said, not refused, as HF
// trains them too. data.long_samples = "split" continues a document's positions across its
// pieces; "truncate" stops them at the budget (unknown yet with token_budget = "auto").
void warn_past_positions(const std::string& path, const data::TokenDataset& dataset, const RunConfig& config) {
  std::uint64_t longest = 0;
  for (std::uint64_t i = 0; i < dataset.num_samples(); ++i) longest = std::max(longest, dataset.sample_length(i));
  const bool truncate = config.data.long_samples == data::LongSamplePolicy::truncate;
  std::uint64_t reach = longest;
  if (truncate && config.step.token_budget > 0)
    reach = std::min(reach, static_cast<std::uint64_t>(config.step.token_budget));
  const std::int64_t limit = config.model.max_position_embeddings;
  if (reach <= static_cast<std::uint64_t>(limit)) return;
  log_warn(cat("dataset ", path, ": its longest document has ", longest, " tokens, so training reaches position ",
               reach, truncate ? "" : " (data.long_samples = \"split\" continues positions across a document's pieces)",
               ", past the model's max_position_embeddings (", limit, "): those positions train rotary angles the "
               "model is not configured for. To stay within it set data.long_samples = \"truncate\" with "
               "train.token_budget <= ", limit, "; or raise max_position_embeddings in model.config"));
}

data::TokenDataset load_checked(const std::string& path, const RunConfig& config) {
  const auto started = std::chrono::steady_clock::now();
  data::TokenDataset dataset = data::TokenDataset::load(path);
  check_vocabulary(path, {dataset.vocab_size(), dataset.eos_id(), dataset.tokenizer(), dataset.num_tokens()},
                   config.model);
  const data::TokenDatasetContents& contents = dataset.contents();
  log_info(cat("dataset ", path, ": ", dataset.num_samples(), " documents, ", dataset.num_tokens(),
               " tokens, loaded in ", seconds_since(started),
               contents.file_tokens_crc32c_verified
                   ? std::string()
                   : cat("; the file stores no token checksum to check its tokens against; the one that identifies "
                         "it to a resume took ", fixed_point(contents.file_tokens_crc32c_seconds, 2),
                         " s of that (topotrain-prepare stores it)")));
  warn_past_positions(path, dataset, config);
  return dataset;
}

std::string describe(const data::TokenDataset& dataset) {
  return cat(dataset.num_samples(), " documents (", dataset.num_tokens(), " tokens)");
}

}  // namespace

TrainingData load_training_data(const RunConfig& config) {
  const DataConfig& data = config.data;
  TrainingData out;
  data::TokenDataset loaded = load_checked(data.path, config);
  if (data.eval_fraction > 0) {
    data::HeldOutSplit split = data::split_held_out(std::move(loaded), data.eval_fraction, config.step.seed);
    log_info(cat("held out ", describe(split.held_out), " of ", data.path, " for evaluation (data.eval_fraction = ",
                 data.eval_fraction, "); training on the other ", describe(split.train)));
    out.train = std::make_shared<const data::TokenDataset>(std::move(split.train));
    out.held_out = std::make_shared<const data::TokenDataset>(std::move(split.held_out));
  } else {
    out.train = std::make_shared<const data::TokenDataset>(std::move(loaded));
    if (!data.eval_path.empty())
      out.held_out = std::make_shared<const data::TokenDataset>(load_checked(data.eval_path, config));
  }
  const data::TokenDataset& dataset = *out.train;
  const std::int64_t budget = config.step.token_budget;
  if (static_cast<std::uint64_t>(budget) > dataset.num_tokens())
    log_info(cat("train.token_budget = ", budget, " is larger than the whole dataset (", dataset.num_tokens(),
                 " tokens): a micro-batch holds at most one pass over the data, so micro-batches hold fewer "
                 "tokens than the budget; a smaller budget and more train.grad_accum use the memory better"));
  return out;
}

std::shared_ptr<const data::TokenizerFiles> stored_tokenizer_files(const std::string& path) {
  if (!is_regular_file(path)) return nullptr;  // a training set built in memory has no file to ask
  data::TokenizerFiles files = data::TokenDataset::stored_tokenizer_files(path);
  return files.empty() ? nullptr : std::make_shared<const data::TokenizerFiles>(std::move(files));
}

TrainingSetIdentity training_set_identity(const data::TokenDataset& train, const std::string& path) {
  std::vector<std::uint64_t> lengths(train.num_samples());
  for (std::uint64_t i = 0; i < lengths.size(); ++i) lengths[i] = train.sample_length(i);
  TrainingSetIdentity identity;
  identity.documents = static_cast<std::int64_t>(train.num_samples());
  identity.tokens = static_cast<std::int64_t>(train.num_tokens());
  identity.lengths_crc = crc32c(lengths.data(), lengths.size() * sizeof(std::uint64_t));
  if (const auto& crc = train.file_tokens_crc32c()) identity.tokens_crc = *crc;
  identity.path = path;
  identity.tokenizer_files = stored_tokenizer_files(path);
  return identity;
}

namespace {

// Known on both sides, and different.
bool differ(const std::optional<std::int64_t>& a, const std::optional<std::int64_t>& b) { return a && b && *a != *b; }

std::string describe(const TrainingSetIdentity& set) {
  std::string what = set.documents ? cat(*set.documents, " documents") : std::string();
  if (set.tokens) what += cat(what.empty() ? "" : " of ", *set.tokens, " tokens");
  return set.path.empty() ? what : cat(what, " (", set.path, ")");
}

}  // namespace

void adopt_training_set(TrainingState& state, const TrainingSetIdentity& mine, const RunConfig& config) {
  TrainingSetIdentity& trained = state.data_set;
  const bool lengths_differ = differ(trained.lengths_crc, mine.lengths_crc);
  const bool tokens_differ = differ(trained.tokens_crc, mine.tokens_crc);
  if (differ(trained.documents, mine.documents) || differ(trained.tokens, mine.tokens) || lengths_differ ||
      tokens_differ) {
    const bool held_out = config.data.eval_fraction > 0;
    throw ConfigError(cat(
        "the checkpoint resumed (step ", state.step, ") was trained on ", describe(trained),
        ", but this launch trains on ", describe(mine),
        held_out ? cat(" less data.eval_fraction = ", config.data.eval_fraction, " drawn by train.seed = ",
                       config.step.seed)
                 : std::string(),
        lengths_differ && trained.documents == mine.documents && trained.tokens == mine.tokens
            ? "; as many documents and tokens, but of other lengths: another file, or the file changed"
        : tokens_differ && !lengths_differ && trained.documents == mine.documents && trained.tokens == mine.tokens
            ? cat("; documents of the same lengths, but other tokens (token checksum ", *mine.tokens_crc, ", trained ",
                  *trained.tokens_crc, "): another file, or the file changed")
            : "",
        state.streams.empty()
            ? cat(". Its data position (sample ", state.data.consumed_samples, " of epoch ", state.data.epoch, ")")
            : cat(". The data positions of its ", state.streams.size(), " target streams"),
        " would skip or repeat samples: resume with the data.path",
        held_out ? ", data.eval_fraction and train.seed" : " and data.eval_fraction",
        " it was trained with, or start a new run from its weights (another checkpoint.run, with model.weights "
        "naming the checkpoint)"));
  }
  if (mine.documents) trained.documents = mine.documents;
  if (mine.tokens) trained.tokens = mine.tokens;
  if (mine.lengths_crc) trained.lengths_crc = mine.lengths_crc;
  if (mine.tokens_crc) trained.tokens_crc = mine.tokens_crc;
  trained.path = mine.path;
  trained.tokenizer_files = mine.tokenizer_files;
}

void log_run_to_file(const std::string& run_dir) {
  make_directories(run_dir);
  log_to_file(join_path(run_dir, kLogFileName));
}

TrainingState initial_state(std::uint64_t seed) {
  TrainingState state;
  state.data.seed = seed;
  return state;
}

bool TrainingLength::done(const TrainingState& state) const {
  if (max_steps > 0 && state.step >= max_steps) return true;
  if (stop_tokens > 0) return state.tokens >= stop_tokens;
  return static_cast<std::int64_t>(state.data.epoch) >= epochs;
}

SchedulePoint TrainingLength::schedule_point(const TrainingState& state) const {
  const SchedulePoint steps{state.step, max_steps}, tokens{state.tokens, planned_tokens};
  switch (schedule) {
    case ScheduleLength::steps: return steps;
    case ScheduleLength::tokens: return tokens;
    case ScheduleLength::run: break;
  }
  if (max_steps <= 0) return tokens;
  if (planned_tokens <= 0) return steps;
  // The limit the run is furthest towards (compared without division: a * d >= c * b).
  const long double by_steps = static_cast<long double>(steps.position) * tokens.length;
  const long double by_tokens = static_cast<long double>(tokens.position) * steps.length;
  return by_steps >= by_tokens ? steps : tokens;
}

std::string TrainingLength::describe_schedule() const {
  const std::string data_tokens = cat(planned_tokens, " tokens");
  switch (schedule) {
    case ScheduleLength::steps: return cat("over ", max_steps, " steps");
    case ScheduleLength::tokens: return "over " + data_tokens;
    case ScheduleLength::run: break;
  }
  if (max_steps <= 0) return "over " + data_tokens;
  return cat("over the run: ", max_steps, " steps, or ", data_tokens, " if they come first");
}

std::string TrainingLength::describe() const {
  std::string what = stop_tokens > 0 ? cat(stop_tokens, " tokens") : cat(epochs, " epoch(s)");
  if (max_steps > 0) what += cat(" or ", max_steps, " steps, whichever comes first");
  return what + "; LR schedule " + describe_schedule();
}

TrainingLength training_length(const LengthConfig& config, std::int64_t dataset_tokens) {
  TrainingLength length;
  length.max_steps = config.max_steps;
  length.stop_tokens = config.max_tokens;
  length.epochs = config.epochs;
  length.dataset_tokens = dataset_tokens;
  length.planned_tokens = length.stop_tokens > 0 ? length.stop_tokens : length.epochs * dataset_tokens;
  length.schedule = config.schedule;
  return length;
}

double learning_rate(const LrConfig& config, const TrainingLength& length, const TrainingState& state) {
  const SchedulePoint point = length.schedule_point(state);
  return LrSchedule{config.peak, config.min_ratio, config.warmup, point.length}.at(point.position);
}

std::string schedule_change(const Settings& saved, const RunConfig& now, const TrainingLength& length,
                            const TrainingState& state) {
  const TrainingLength before = training_length(length_config_from(saved), length.dataset_tokens);
  const double lr_before = learning_rate(lr_config_from(saved), before, state);
  const double lr_now = learning_rate(now.lr, length, state);
  auto text = [](double lr) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.2e", lr);
    return std::string(buffer);
  };
  if (text(lr_before) == text(lr_now)) return {};
  return cat("LR at step ", state.step, ": ", text(lr_before), " under the checkpoint's schedule (",
             before.describe_schedule(), ") -> ", text(lr_now), " now (", length.describe_schedule(), ")");
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

std::unique_ptr<data::Prefetcher> make_step_prefetcher(std::shared_ptr<const data::TokenDataset> dataset,
                                                       const RunConfig& config, std::int64_t token_budget,
                                                       int rank, int world, int grad_accum,
                                                       const data::DataPosition& position,
                                                       const torch::Device& device, data::SampleStream stream) {
  data::PackerConfig packing;
  packing.token_budget = static_cast<std::uint64_t>(token_budget);
  packing.long_samples = config.data.long_samples;
  packing.pin_memory = device.is_cuda();
  packing.stream = stream;
  packing.end_epoch = training_length(config.length, static_cast<std::int64_t>(dataset->num_tokens())).end_epoch();
  auto planner = std::make_shared<data::StepPlanner>(std::move(dataset), packing,
                                                     data::DataParallelConfig{world, rank, grad_accum}, position);
  data::PrefetchConfig prefetch;
  prefetch.depth = config.data.prefetch;
  prefetch.device = device;
  return std::make_unique<data::Prefetcher>([planner] { return planner->next_step(); }, prefetch);
}

double attention_context(const DataConfig& config, const data::TokenDataset& dataset, std::int64_t token_budget) {
  return data::mean_attention_context(dataset, static_cast<std::uint64_t>(token_budget), config.long_samples);
}

}  // namespace topotrain
