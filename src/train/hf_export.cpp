#include "topotrain/train/hf_export.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/data/tokenizer_files.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/dflash_hf.h"
#include "topotrain/model/hf_checkpoint.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/trained_models.h"
#include "topotrain/train/training_checkpoint.h"

namespace topotrain {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool is_export_file(const std::string& name) {
  const std::string ext = file_extension(name);
  return name == "config.json" || name == "generation_config.json" || name == "model.safetensors.index.json" ||
         ext == ".safetensors";
}

// What transformers' generate reads: the config's bos/eos/pad ids and the tokenizer's special
// tokens, the tokenizer's eos first (a chat tokenizer's end of turn, where generation must
// stop), the config's after it; nullopt when neither names an eos.
std::optional<nlohmann::json> generation_config(const model::ModelConfig& config, const data::TokenizerFiles& files) {
  const data::SpecialTokenIds special = data::special_token_ids(files);
  std::vector<std::int64_t> eos;
  if (special.eos) eos.push_back(*special.eos);
  for (const std::int64_t id : config.eos_token_ids())
    if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  if (eos.empty()) return std::nullopt;
  nlohmann::json doc = {{"eos_token_id", eos.size() == 1 ? nlohmann::json(eos[0]) : nlohmann::json(eos)}};
  auto first_of = [&](const char* key, const std::optional<std::int64_t>& from_tokenizer) {
    const auto it = config.token_ids.find(key);
    if (it != config.token_ids.end() && !it->second.empty()) doc[key] = it->second.front();
    else if (from_tokenizer) doc[key] = *from_tokenizer;
  };
  first_of("bos_token_id", special.bos);
  first_of("pad_token_id", special.pad);
  return doc;
}

// An empty (or new) out_dir, or with `force` one cleared of an earlier export's files: a
// stale index or shard left beside a new export would be loaded in its place.
void prepare_out_dir(const std::string& out_dir, bool force) {
  if (file_exists(out_dir) && !is_directory(out_dir))
    throw ConfigError(cat("OUT_DIR ", out_dir, " exists and is not a directory"));
  if (is_directory(out_dir)) {
    const std::vector<std::string> entries = list_directory(out_dir);
    if (!entries.empty() && !force)
      throw ConfigError(cat("OUT_DIR ", out_dir, " is not empty (", entries.size(), " entries, e.g. '", entries[0],
                            "'); pass an empty or new directory, or --force to replace an export there"));
    for (const std::string& name : entries)
      if (is_export_file(name)) remove_file(join_path(out_dir, name));
  }
  make_directories(out_dir);
}

// A drafter that serving stacks could not run as it was trained: its mask token must be a
// row of the target's embedding, and target_layer_ids[i] is read as HF's hidden_states[i + 1],
// whose last entry HF returns after the final norm, unlike the tap the drafter trained on.
void check_servable(const std::string& checkpoint, const model::DFlashConfig& drafter) {
  const model::ModelConfig& target = drafter.target;
  if (drafter.mask_token_id < 0 || drafter.mask_token_id >= target.vocab_size)
    throw ConfigError(cat("checkpoint ", checkpoint, ": the drafter's mask_token_id ", drafter.mask_token_id,
                          " is outside its target's vocabulary [0, ", target.vocab_size, ") (", target.source,
                          "): serving stacks embed the mask token with the target's embedding and refuse it; train "
                          "the drafter with model.mask_token_id set to an id of the vocabulary"));
  for (const std::int64_t tap : drafter.resolved_taps())
    if (tap == target.num_hidden_layers - 1)
      throw ConfigError(cat("checkpoint ", checkpoint, ": the drafter taps the target's last layer (", tap,
                            "), whose output serving stacks read as HF's hidden_states[", tap + 1,
                            "], which HF returns after the final norm, unlike the tap the drafter trained on: train "
                            "it with model.taps below ", tap));
}

}  // namespace

HfExportResult export_hf(const HfExportOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (!file_exists(options.source))
    throw ConfigError(cat(options.source, " does not exist; pass a run directory (checkpoint.dir/<run>) or one of "
                          "its step-*.h5 checkpoints"));
  const auto checkpoint = CheckpointReader::checkpoint_at(options.source);
  if (!checkpoint)
    throw ConfigError(cat(options.source, " is neither a topotrain checkpoint (step-*.h5) nor a run directory "
                          "holding one"));
  if (options.dtype != torch::kBFloat16 && options.dtype != torch::kFloat32)
    throw ConfigError(cat("export dtype ", options.dtype, ": use bf16 or fp32"));
  if (!(options.max_shard_gib > 0))
    throw ConfigError(cat("--max-shard-gb ", options.max_shard_gib, ": must be positive"));
  const auto max_shard_bytes = static_cast<std::int64_t>(options.max_shard_gib * kGiB);
  const CheckpointState header = CheckpointReader::load_header(*checkpoint);
  HfExportResult result;
  result.checkpoint = *checkpoint;
  result.step = header.step;
  result.dtype = options.dtype;
  std::vector<std::string> written;
  // Each model is built, then overwritten, so that the checkpoint's tensors are checked
  // against exactly the parameters its stored config implies.
  if (holds_drafter(header)) {
    const model::DFlashConfig config = drafter_config_at(*checkpoint);
    check_servable(*checkpoint, config);
    prepare_out_dir(options.out_dir, options.force);
    model::DFlashDrafter drafter(config);
    if (!load_drafter_tensors(*checkpoint, *drafter))
      throw ConfigError(cat("checkpoint ", *checkpoint, " stores its drafter's settings but not its final norm "
                            "(frozen/target_norm): it is damaged; export another checkpoint of the run"));
    written = model::save_dflash_hf(*drafter, options.out_dir, options.dtype, max_shard_bytes);
    result.config = config.target;
    result.drafter = config;
  } else {
    result.config = target_config_at(*checkpoint);
    prepare_out_dir(options.out_dir, options.force);
    model::CausalLM model(result.config);
    load_model_tensors(*checkpoint, named_parameters_of(*model));
    written = model::save_hf_checkpoint(*model, options.out_dir, options.dtype, max_shard_bytes);
    // The tokenizer and generation settings the model was trained with, so that
    // AutoTokenizer and generate need nothing but this folder.
    for (const std::string& path : data::write_tokenizer_files(header.tokenizer_files, options.out_dir))
      written.insert(written.end() - 1, path);
    if (const auto generation = generation_config(result.config, header.tokenizer_files)) {
      const std::string path = join_path(options.out_dir, "generation_config.json");
      std::ofstream out(path, std::ios::trunc);
      if (!(out << generation->dump(2) << "\n") || !out.flush()) throw ConfigError(cat("cannot write '", path, "'"));
      written.insert(written.end() - 1, path);
    } else {
      result.notes.push_back("no generation_config.json: neither the model's config nor a tokenizer names an eos "
                             "token, so generate stops only at max_new_tokens");
    }
    if (header.tokenizer_files.empty())
      result.notes.push_back("no tokenizer files: the training data stores none (byte-tokenized, or prepared by an "
                             "older topotrain); copy the tokenizer it was prepared with into the folder");
  }
  for (const std::string& path : written) result.files.emplace_back(path, file_size(path));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::string describe(const HfExportResult& result) {
  const model::DFlashConfig* drafter = result.drafter ? &*result.drafter : nullptr;
  const std::string what =
      drafter ? cat(model::kDFlashArchitecture, ": ", drafter->num_draft_layers, " layers, block ", drafter->block_size,
                    ", for a target of ", result.config.num_hidden_layers, " layers trained as ", result.config.source)
              : cat(result.config.source, ", ", result.config.architecture());
  std::string text = cat("exported ", result.checkpoint, " (step ", result.step, ", ", what, ") as ",
                         result.dtype == torch::kFloat32 ? "fp32" : "bf16", ":\n");
  std::uint64_t total = 0;
  char line[64];
  for (const auto& [path, bytes] : result.files) {
    std::snprintf(line, sizeof(line), "%12.1f MiB  ", static_cast<double>(bytes) / (1024.0 * 1024.0));
    text += cat("  ", line, path, "\n");
    total += bytes;
  }
  std::snprintf(line, sizeof(line), "%.3f GiB in %.1f s", static_cast<double>(total) / kGiB, result.seconds);
  text += cat(result.files.size(), " files, ", line, "\n");
  for (const std::string& note : result.notes) text += cat("note: ", note, "\n");
  if (!drafter) return text;
  const std::vector<std::int64_t> taps = drafter->resolved_taps();
  std::string read;  // what the reference reads for each tap
  for (const std::int64_t tap : taps) read += cat(read.empty() ? "" : ", ", "hidden_states[", tap + 1, "]");
  return text + cat("mask token: id ", drafter->mask_token_id, " (dflash_config.mask_token_id), the token of the "
                    "drafter's block slots 1..", drafter->block_size - 1, ". A serving stack that looks the mask "
                    "token up in the target's tokenizer instead (the DFlash reference code adds the text \"<|MASK|>\" "
                    "as an added token) must find it at id ", drafter->mask_token_id, ".\n",
                    "target_layer_ids: [", model::taps_text(taps), "] (model.taps): the drafter reads the outputs of "
                    "the target's decoder layers ", model::taps_text(taps), " (0-based; HF's ", read,
                    "); serve it beside the target it was trained against.\n");
}

}  // namespace topotrain
