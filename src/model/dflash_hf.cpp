#include "topotrain/model/dflash_hf.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/model/config.h"
#include "topotrain/model/hf_checkpoint.h"

namespace topotrain::model {
namespace {

using nlohmann::json;

constexpr const char* kFullAttention = "full_attention";

std::string config_path_of(const std::string& path) {
  return join_path(is_directory(path) ? path : parent_directory(path), "config.json");
}

json read_json(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw ConfigError(cat(file, " cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::parse_error& e) {
    throw ConfigError(cat(file, ": not valid JSON (", e.what(), ")"));
  }
}

// `object`[key] as a T; ConfigError naming the file and key when it is missing or another type.
template <typename T>
T required(const json& object, const std::string& key, const std::string& file) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null())
    throw ConfigError(cat(file, ": a DFlash drafter's config needs '", key, "', which is missing"));
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw ConfigError(cat(file, ": '", key, "' has the wrong type (", it->dump(), ")"));
  }
}

// Why a config.json that is not a DFlash drafter's is not: what it is instead.
std::string not_a_drafter(const json& doc, const std::string& file) {
  const std::string architectures = doc.contains("architectures") ? doc.at("architectures").dump() : "none";
  const std::string model_type = doc.value("model_type", std::string());
  const auto family = family_of_model_type(model_type);
  return cat(file, " is the config of ",
             family ? cat("a ", to_string(*family), " model (architectures ", architectures, "): a target, not a drafter")
                    : cat("architectures ", architectures, ", not a DFlash drafter"),
             "; a drafter is a folder whose config.json has architectures [\"", kDFlashArchitecture,
             "\"] (topotrain-export of a dflash_train run writes one), a drafter checkpoint or its run directory");
}

// A config.json document whose architectures list names a DFlash drafter.
bool lists_dflash_architecture(const json& doc) {
  const auto architectures = doc.find("architectures");
  if (architectures == doc.end() || !architectures->is_array()) return false;
  for (const json& architecture : *architectures)
    if (architecture == kDFlashArchitecture) return true;
  return false;
}

NamedTensors drafter_views(DFlashDrafterImpl& drafter) {
  NamedTensors views;
  for (const auto& item : drafter.named_parameters()) views.emplace_back(item.key(), item.value());
  views.emplace_back("norm.weight", drafter.target_norm);
  return views;
}

}  // namespace

bool is_dflash_hf_folder(const std::string& path) {
  const std::string file = config_path_of(path);
  if (!is_regular_file(file)) return false;
  std::ifstream in(file);
  const json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  return doc.is_object() && lists_dflash_architecture(doc);
}

std::string dflash_config_json(const DFlashConfig& config, const std::string& dtype) {
  json doc = json::parse(config.layer_config().to_json_text(dtype));
  doc["architectures"] = json::array({kDFlashArchitecture});
  doc["num_target_layers"] = config.target.num_hidden_layers;
  doc["block_size"] = config.block_size;
  doc["dflash_config"] = {{"mask_token_id", config.mask_token_id}, {"target_layer_ids", config.resolved_taps()}};
  doc["layer_types"] = std::vector<std::string>(static_cast<std::size_t>(config.num_draft_layers), kFullAttention);
  // Keys the public drafters' configs spell out, which transformers' Qwen3Config would
  // otherwise fill with its own defaults.
  doc["sliding_window"] = nullptr;
  doc["use_cache"] = true;
  return doc.dump(2);
}

std::vector<std::string> save_dflash_hf(DFlashDrafterImpl& drafter, const std::string& directory,
                                        torch::ScalarType dtype, int64_t max_shard_bytes) {
  return save_hf_tensors(directory, drafter_views(drafter), dflash_config_json(drafter.config(), hf_dtype_name(dtype)),
                         dtype, max_shard_bytes);
}

DFlashConfig read_dflash_hf_config(const std::string& path) {
  const std::string file = config_path_of(path);
  if (!is_regular_file(file))
    throw ConfigError(cat(path, " has no config.json beside it: a DFlash drafter's folder holds config.json and its "
                          "safetensors (topotrain-export of a dflash_train run writes one)"));
  json doc = read_json(file);
  if (!doc.is_object()) throw ConfigError(cat(file, ": expected a JSON object"));
  if (!lists_dflash_architecture(doc)) throw ConfigError(not_a_drafter(doc, file));

  DFlashConfig config;
  config.source = file;
  config.block_size = required<int64_t>(doc, "block_size", file);
  const auto num_target_layers = required<int64_t>(doc, "num_target_layers", file);
  const json dflash = required<json>(doc, "dflash_config", file);
  if (!dflash.is_object()) throw ConfigError(cat(file, ": 'dflash_config' must be an object, got ", dflash.dump()));
  for (const auto& [key, value] : dflash.items()) {
    if (key != "mask_token_id" && key != "target_layer_ids")
      throw ConfigError(cat(file, ": dflash_config.", key, " = ", value.dump(), " is a DFlash variant topotrain's "
                            "drafter does not have (it reads mask_token_id and target_layer_ids)"));
  }
  config.mask_token_id = required<int64_t>(dflash, "mask_token_id", cat(file, " dflash_config"));
  if (dflash.contains("target_layer_ids"))
    config.taps = required<std::vector<int64_t>>(dflash, "target_layer_ids", cat(file, " dflash_config"));
  if (doc.contains("layer_types")) {
    for (const auto& type : required<std::vector<std::string>>(doc, "layer_types", file)) {
      if (type != kFullAttention)
        throw ConfigError(cat(file, ": layer_types lists '", type, "'; topotrain's drafter has full_attention "
                              "layers only"));
    }
  }
  // What is left are the draft layers' Qwen3 keys, which ModelConfig reads (and checks).
  for (const char* key : {"architectures", "dflash_config", "num_target_layers", "block_size", "layer_types"})
    doc.erase(key);
  ModelConfig layers = ModelConfig::from_json_text(doc.dump(), file);
  config.num_draft_layers = layers.num_hidden_layers;
  config.target = layers;
  config.target.source = cat(file, "'s target");
  config.target.num_hidden_layers = num_target_layers;
  return config;
}

void load_dflash_hf(DFlashDrafterImpl& drafter, const std::string& path) {
  load_hf_tensors(path, drafter_views(drafter));
}

}  // namespace topotrain::model
