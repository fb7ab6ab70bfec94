#include "topotrain/train/training_checkpoint.h"

#include <map>
#include <optional>

#include "topotrain/core/error.h"
#include "topotrain/store/checkpoint_reader.h"

namespace topotrain {
namespace {

// A drafter's final norm: the target's, frozen, so a tensor of the checkpoint that no
// resume expects.
constexpr const char* kFrozenNorm = "frozen/target_norm";

std::map<std::string, at::Tensor> model_tensors(const NamedParameters& parameters) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, p] : parameters) out["model/" + name] = p.detach();
  return out;
}

void store_model_config(CheckpointState& checkpoint, const model::ModelConfig& model) {
  checkpoint.model_config_json = model.to_json_text();
  checkpoint.model_config_source = model.source;
}

// The tensors a checkpoint holds: "model/<name>" and "optim/<AdamW state name>".
std::map<std::string, at::Tensor> checkpoint_tensors(const NamedParameters& parameters, const AdamW& optimizer) {
  std::map<std::string, at::Tensor> tensors = model_tensors(parameters);
  for (const auto& [name, t] : optimizer.state()) tensors["optim/" + name] = t;
  return tensors;
}

}  // namespace

CheckpointState snapshot(const RunFile& run, const std::string& model_name, const NamedParameters& parameters,
                         const AdamW& optimizer, const TrainingState& state) {
  CheckpointState checkpoint;
  checkpoint.step = state.step;
  checkpoint.tensors = checkpoint_tensors(parameters, optimizer);
  checkpoint.model_identity = model_identity(model_name, model_tensors(parameters));
  checkpoint.ints = {{"tokens", state.tokens},
                     {"optimizer_steps", optimizer.steps()},
                     {"data_seed", static_cast<std::int64_t>(state.data.seed)},
                     {"data_epoch", static_cast<std::int64_t>(state.data.epoch)},
                     {"data_consumed_samples", static_cast<std::int64_t>(state.data.consumed_samples)},
                     {"data_offset_in_sample", static_cast<std::int64_t>(state.data.offset_in_sample)}};
  const TrainingSetIdentity& set = state.data_set;
  if (set.documents) checkpoint.ints["data_documents"] = *set.documents;
  if (set.tokens) checkpoint.ints["data_tokens"] = *set.tokens;
  if (set.lengths_crc) checkpoint.ints["data_lengths_crc"] = *set.lengths_crc;
  if (set.tokens_crc) checkpoint.ints["data_tokens_crc"] = *set.tokens_crc;
  if (!set.path.empty()) checkpoint.texts["data_path"] = set.path;
  if (set.tokenizer_files) checkpoint.tokenizer_files = *set.tokenizer_files;
  if (state.measured_budget.budget > 0) {
    checkpoint.ints["auto_token_budget"] = state.measured_budget.budget;
    checkpoint.reals["auto_peak_bytes_per_token"] = state.measured_budget.bytes_per_token;
  }
  checkpoint.ints["streams"] = static_cast<std::int64_t>(state.streams.size());
  for (std::size_t i = 0; i < state.streams.size(); ++i) {
    const data::DataPosition& p = state.streams[i];
    const std::string key = cat("stream", i, "_");
    checkpoint.ints[key + "seed"] = static_cast<std::int64_t>(p.seed);
    checkpoint.ints[key + "epoch"] = static_cast<std::int64_t>(p.epoch);
    checkpoint.ints[key + "consumed_samples"] = static_cast<std::int64_t>(p.consumed_samples);
    checkpoint.ints[key + "offset_in_sample"] = static_cast<std::int64_t>(p.offset_in_sample);
  }
  checkpoint.settings_toml = run.settings.to_toml();
  checkpoint.topology_text = run.topology_text;
  return checkpoint;
}

CheckpointState snapshot(const RunFile& run, const model::ModelConfig& model, const NamedParameters& parameters,
                         const AdamW& optimizer, const TrainingState& state) {
  CheckpointState checkpoint = snapshot(run, model.source, parameters, optimizer, state);
  store_model_config(checkpoint, model);
  return checkpoint;
}

CheckpointState snapshot(const RunFile& run, const model::DFlashDrafterImpl& drafter,
                         const NamedParameters& parameters, const AdamW& optimizer, const TrainingState& state) {
  const model::DFlashConfig& config = drafter.config();
  CheckpointState checkpoint = snapshot(run, kDFlashDrafterModel, parameters, optimizer, state);
  store_model_config(checkpoint, config.target);
  checkpoint.tensors[kFrozenNorm] = drafter.target_norm.detach();
  checkpoint.ints["dflash_draft_layers"] = config.num_draft_layers;
  checkpoint.ints["dflash_block_size"] = config.block_size;
  checkpoint.ints["dflash_mask_token_id"] = config.mask_token_id;
  checkpoint.ints["dflash_max_anchors"] = config.max_anchors;
  const std::vector<std::int64_t> taps = config.resolved_taps();
  checkpoint.ints["dflash_taps"] = static_cast<std::int64_t>(taps.size());
  for (std::size_t i = 0; i < taps.size(); ++i) checkpoint.ints[cat("dflash_tap", i)] = taps[i];
  checkpoint.reals["dflash_gamma"] = config.gamma;
  checkpoint.texts["dflash_loss"] = model::to_string(config.loss);
  return checkpoint;
}

bool holds_drafter(const CheckpointState& header) {
  return header.model_identity.rfind(cat(kDFlashDrafterModel, "/"), 0) == 0;
}

std::optional<model::ModelConfig> stored_model_config(const std::string& path, const CheckpointState& header) {
  if (header.model_config_json.empty()) return std::nullopt;
  model::ModelConfig config = model::ModelConfig::from_json_text(header.model_config_json, cat(path, ": model_config"));
  config.source = header.model_config_source;
  return config;
}

std::optional<model::DFlashConfig> stored_drafter_config(const std::string& path, const CheckpointState& header) {
  const std::optional<model::ModelConfig> target = stored_model_config(path, header);
  if (!holds_drafter(header) || !target || header.ints.count("dflash_block_size") == 0) return std::nullopt;
  auto find = [&](const auto& values, const std::string& key) {
    const auto it = values.find(key);
    if (it == values.end())
      throw ConfigError(cat("checkpoint ", path, " lacks '", key, "' of its drafter's DFlash settings: it is damaged; "
                            "name another checkpoint of the run"));
    return it->second;
  };
  model::DFlashConfig config;
  config.source = cat("checkpoint ", path);
  config.target = *target;
  config.num_draft_layers = find(header.ints, "dflash_draft_layers");
  config.block_size = find(header.ints, "dflash_block_size");
  config.mask_token_id = find(header.ints, "dflash_mask_token_id");
  config.max_anchors = find(header.ints, "dflash_max_anchors");
  const std::int64_t taps = find(header.ints, "dflash_taps");
  for (std::int64_t i = 0; i < taps; ++i) config.taps.push_back(find(header.ints, cat("dflash_tap", i)));
  config.gamma = find(header.reals, "dflash_gamma");
  config.loss = model::parse_dflash_loss(find(header.texts, "dflash_loss"), cat("checkpoint ", path, ": dflash_loss"));
  return config;
}

void load_model_tensors(const std::string& path, const NamedParameters& parameters) {
  const std::map<std::string, at::Tensor> wanted = model_tensors(parameters);
  CheckpointExpectations expectations;
  expectations.expect_like(wanted);
  const CheckpointState checkpoint = CheckpointReader::load(path, expectations, "model/");
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : parameters) p.copy_(checkpoint.tensors.at("model/" + name));
}

bool load_drafter_tensors(const std::string& path, model::DFlashDrafterImpl& drafter) {
  load_model_tensors(path, named_parameters_of(drafter));
  const CheckpointState frozen = CheckpointReader::load(path, CheckpointExpectations{}, "frozen/");
  const auto norm = frozen.tensors.find(kFrozenNorm);
  if (norm == frozen.tensors.end()) return false;
  if (norm->second.sizes() != drafter.target_norm.sizes())
    throw ConfigError(cat("checkpoint ", path, ": tensor '", kFrozenNorm, "' has shape ", norm->second.sizes(),
                          " but the drafter's final norm has ", drafter.target_norm.sizes(), "; it is damaged"));
  torch::NoGradGuard no_grad;
  drafter.target_norm.copy_(norm->second);
  return true;
}

CheckpointExpectations expectations_for(const std::string& model_name, const NamedParameters& parameters,
                                        const AdamW& optimizer) {
  CheckpointExpectations expectations;
  expectations.model_identity = model_identity(model_name, model_tensors(parameters));
  expectations.expect_like(checkpoint_tensors(parameters, optimizer));
  return expectations;
}

void restore(const CheckpointState& checkpoint, const NamedParameters& parameters, AdamW& optimizer,
             TrainingState& state) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : parameters) p.copy_(checkpoint.tensors.at("model/" + name));
  std::vector<std::pair<std::string, torch::Tensor>> optim;
  for (const auto& [name, t] : checkpoint.tensors)
    if (name.rfind("optim/", 0) == 0) optim.emplace_back(name.substr(6), t);
  auto integer = [&](const char* key) {
    auto it = checkpoint.ints.find(key);
    if (it == checkpoint.ints.end()) throw ConfigError(cat("checkpoint lacks '", key, "': not a training checkpoint"));
    return it->second;
  };
  optimizer.load_state(optim, integer("optimizer_steps"));
  state.step = checkpoint.step;
  state.tokens = integer("tokens");
  state.data.seed = static_cast<std::uint64_t>(integer("data_seed"));
  state.data.epoch = static_cast<std::uint64_t>(integer("data_epoch"));
  state.data.consumed_samples = static_cast<std::uint64_t>(integer("data_consumed_samples"));
  state.data.offset_in_sample = static_cast<std::uint64_t>(integer("data_offset_in_sample"));
  // Absent in checkpoints of older versions (and of runs that did not know them): not compared.
  auto optional_integer = [&](const char* key) -> std::optional<std::int64_t> {
    const auto it = checkpoint.ints.find(key);
    if (it == checkpoint.ints.end()) return std::nullopt;
    return it->second;
  };
  state.data_set.documents = optional_integer("data_documents");
  state.data_set.tokens = optional_integer("data_tokens");
  state.data_set.lengths_crc = optional_integer("data_lengths_crc");
  state.data_set.tokens_crc = optional_integer("data_tokens_crc");
  const auto path = checkpoint.texts.find("data_path");
  state.data_set.path = path != checkpoint.texts.end() ? path->second : std::string();
  state.streams.clear();
  auto streams = checkpoint.ints.find("streams");
  for (std::int64_t i = 0; streams != checkpoint.ints.end() && i < streams->second; ++i) {
    const std::string key = cat("stream", i, "_");
    data::DataPosition p;
    p.seed = static_cast<std::uint64_t>(integer((key + "seed").c_str()));
    p.epoch = static_cast<std::uint64_t>(integer((key + "epoch").c_str()));
    p.consumed_samples = static_cast<std::uint64_t>(integer((key + "consumed_samples").c_str()));
    p.offset_in_sample = static_cast<std::uint64_t>(integer((key + "offset_in_sample").c_str()));
    state.streams.push_back(p);
  }
}

}  // namespace topotrain
