#include "topotrain/train/trained_models.h"

#include <cstdint>
#include <fstream>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/model/dflash_hf.h"
#include "topotrain/model/hf_checkpoint.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/training_checkpoint.h"

namespace topotrain {
namespace {

// The fix for a checkpoint that cannot describe its model.
constexpr const char* kResumeOnce =
    "resume its run for one step with this topotrain (--resume PATH) to write a checkpoint that does";

ConfigError drafter_as_target(const std::string& what) {
  return ConfigError(cat(what, " holds a DFlash drafter, not a target model: name it where a drafter is asked for "
                               "(dflash_train's model.draft_weights, a decoder's drafter) and name the target it was "
                               "trained against here"));
}

std::string hf_folder_of(const std::string& path) { return is_directory(path) ? path : parent_directory(path); }

// The checkpoint a target path names and its header, where it names one; a drafter's is refused.
struct TargetCheckpoint {
  std::string file;
  CheckpointState header;
};
std::optional<TargetCheckpoint> target_checkpoint_at(const std::string& path) {
  const auto checkpoint = CheckpointReader::checkpoint_at(path);
  if (!checkpoint) return std::nullopt;
  TargetCheckpoint found{*checkpoint, CheckpointReader::load_header(*checkpoint)};
  if (holds_drafter(found.header)) throw drafter_as_target(cat("checkpoint ", found.file));
  return found;
}

// The eos ids of a Hugging Face folder's generation_config.json, where it has one: what
// transformers' generate stops at, which reads that file instead of config.json's ids where it
// exists (GenerationMixin's load of the generation config). A folder without the file gives
// nullopt; one whose file names no eos_token_id gives none.
std::optional<std::vector<std::int64_t>> generation_eos_ids(const std::string& folder) {
  const std::string path = join_path(folder, "generation_config.json");
  if (!is_regular_file(path)) return std::nullopt;
  std::ifstream in(path);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError(cat(path, ": not valid JSON (", e.what(), "); fix or remove it (transformers' generate reads ",
                          "its eos_token_id)"));
  }
  const auto eos = doc.is_object() ? doc.find("eos_token_id") : doc.end();
  std::vector<std::int64_t> ids;
  if (eos == doc.end() || eos->is_null()) return ids;
  for (const nlohmann::json& id : eos->is_array() ? *eos : nlohmann::json::array({*eos})) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0)
      throw ConfigError(cat(path, ": eos_token_id ", eos->dump(), " is not a token id or a list of them"));
    ids.push_back(id.get<std::int64_t>());
  }
  return ids;
}

}  // namespace

model::ModelConfig target_config_at(const std::string& path) {
  if (!file_exists(path))
    throw ConfigError(cat(path, " does not exist; pass a Hugging Face model folder (config.json and safetensors), a "
                          "topotrain checkpoint (step-*.h5) or its run directory"));
  if (const auto checkpoint = target_checkpoint_at(path)) {
    const auto config = stored_model_config(checkpoint->file, checkpoint->header);
    if (!config)
      throw ConfigError(cat("checkpoint ", checkpoint->file, " (model '", checkpoint->header.model_identity,
                            "') stores no model config: it was written by a topotrain older than checkpoints that "
                            "carry their config.json; ", kResumeOnce));
    return *config;
  }
  const std::string config_json = join_path(hf_folder_of(path), "config.json");
  if (!is_regular_file(config_json))
    throw ConfigError(cat(path, " is neither a topotrain checkpoint (step-*.h5) or run directory nor a Hugging Face "
                          "model folder: ", config_json, " does not exist"));
  model::ModelConfig config = model::ModelConfig::from_json_file(config_json);
  if (const auto eos = generation_eos_ids(hf_folder_of(path))) {
    if (eos->empty()) config.token_ids.erase("eos_token_id");
    else config.token_ids["eos_token_id"] = *eos;
  }
  return config;
}

void load_target_weights(const std::string& path, model::CausalLMImpl& model) {
  if (const auto checkpoint = target_checkpoint_at(path)) {
    const auto stored = stored_model_config(checkpoint->file, checkpoint->header);
    if (stored && !stored->same_model(model.config()))
      throw ConfigError(cat("checkpoint ", checkpoint->file, " holds a model trained as ", stored->source,
                            ", but this run builds ", model.config().source, ": leave model.preset and model.config "
                            "unset to build the checkpoint's model, or set them to the model it holds"));
    load_model_tensors(checkpoint->file, named_parameters_of(model));
    return;
  }
  if (model::is_dflash_hf_folder(path)) throw drafter_as_target(cat(hf_folder_of(path), " (a DFlash folder)"));
  model::load_hf_checkpoint(model, path);
}

model::CausalLM load_target_model(const std::string& path) {
  model::CausalLM target(target_config_at(path));
  load_target_weights(path, *target);
  return target;
}

model::DFlashConfig drafter_config_at(const std::string& path) {
  if (!file_exists(path))
    throw ConfigError(cat(path, " does not exist; pass a DFlash drafter's folder (topotrain-export of a dflash_train "
                          "run), a drafter checkpoint (step-*.h5) or its run directory"));
  if (const auto checkpoint = CheckpointReader::checkpoint_at(path)) {
    const CheckpointState header = CheckpointReader::load_header(*checkpoint);
    if (!holds_drafter(header))
      throw ConfigError(cat("checkpoint ", *checkpoint, " holds model '", header.model_identity,
                            "', not a DFlash drafter: a Qwen3, Llama or Qwen2 model is a target (dflash_train's "
                            "model.weights); a drafter is what dflash_train trains against one"));
    if (auto config = stored_drafter_config(*checkpoint, header)) return *config;
    throw ConfigError(cat("checkpoint ", *checkpoint, " holds a DFlash drafter written by a topotrain older than "
                          "drafter checkpoints that store their settings and their target's config; ", kResumeOnce));
  }
  return model::read_dflash_hf_config(path);
}

void load_drafter_weights(const std::string& path, model::DFlashDrafterImpl& drafter) {
  if (const auto checkpoint = CheckpointReader::checkpoint_at(path))
    load_drafter_tensors(*checkpoint, drafter);
  else
    model::load_dflash_hf(drafter, path);
}

model::DFlashDrafter load_drafter_model(const std::string& path, model::CausalLMImpl& target) {
  model::DFlashConfig config = drafter_config_at(path);
  config.check_target(target.config());
  config.target = target.config();
  model::DFlashDrafter drafter(config);
  drafter->load_target_tensors(target);
  load_drafter_weights(path, *drafter);
  return drafter;
}

}  // namespace topotrain
