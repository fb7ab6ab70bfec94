#include "topotrain/train/run_setup.h"

#include <algorithm>
#include <chrono>

#include "topotrain/comm/device_sharers.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/log.h"
#include "topotrain/data/held_out_split.h"
#include "topotrain/store/run_dir_files.h"
#include "topotrain/torch_compat.h"
#include "topotrain/train/run_input_checks.h"
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

void load_model_weights(const Runtime& runtime, const std::string& weights, model::CausalLMImpl& model) {
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

void log_run_to_file(const std::string& run_dir) {
  make_directories(run_dir);
  log_to_file(join_path(run_dir, kLogFileName));
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
