#include "topotrain/train/hf_export.h"

#include <chrono>
#include <cstdio>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/model/hf_checkpoint.h"
#include "topotrain/model/qwen3.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/training_checkpoint.h"

namespace topotrain {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool is_export_file(const std::string& name) {
  const std::string ext = file_extension(name);
  return name == "config.json" || name == "model.safetensors.index.json" || ext == ".safetensors";
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
  const CheckpointState header = CheckpointReader::load_header(*checkpoint);
  if (header.model_identity.rfind(cat(kDFlashDrafterModel, "/"), 0) == 0)
    throw ConfigError(cat("checkpoint ", *checkpoint, " holds a DFlash drafter (model '", kDFlashDrafterModel,
                          "'), which is not a Qwen3 model; topotrain-export writes Qwen3 and Qwen3-MoE models (the "
                          "target a drafter was trained against is exported from its own moe_train run)"));
  const auto config = stored_model_config(*checkpoint, header);
  if (!config)
    throw ConfigError(cat("checkpoint ", *checkpoint, " (model '", header.model_identity,
                          "') stores no model config: it was written by a topotrain older than checkpoints that "
                          "carry their config.json; resume its run for one step with this topotrain "
                          "(--resume PATH) to write a checkpoint that does"));
  if (options.dtype != torch::kBFloat16 && options.dtype != torch::kFloat32)
    throw ConfigError(cat("export dtype ", options.dtype, ": use bf16 or fp32"));
  if (!(options.max_shard_gib > 0))
    throw ConfigError(cat("--max-shard-gb ", options.max_shard_gib, ": must be positive"));
  prepare_out_dir(options.out_dir, options.force);

  // Built, then overwritten, so that the checkpoint's tensors are checked against exactly
  // the parameters the stored config implies.
  model::Qwen3CausalLM model(*config);
  load_model_tensors(*checkpoint, named_parameters_of(*model));
  const auto max_shard_bytes = static_cast<std::int64_t>(options.max_shard_gib * kGiB);

  HfExportResult result;
  result.checkpoint = *checkpoint;
  result.step = header.step;
  result.config = *config;
  result.dtype = options.dtype;
  for (const std::string& path : model::save_hf_checkpoint(*model, options.out_dir, options.dtype, max_shard_bytes))
    result.files.emplace_back(path, file_size(path));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::string describe(const HfExportResult& result) {
  std::string text = cat("exported ", result.checkpoint, " (step ", result.step, ", ", result.config.source, ", ",
                         result.config.is_moe() ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM", ") as ",
                         result.dtype == torch::kFloat32 ? "fp32" : "bf16", ":\n");
  std::uint64_t total = 0;
  char line[64];
  for (const auto& [path, bytes] : result.files) {
    std::snprintf(line, sizeof(line), "%12.1f MiB  ", static_cast<double>(bytes) / (1024.0 * 1024.0));
    text += cat("  ", line, path, "\n");
    total += bytes;
  }
  std::snprintf(line, sizeof(line), "%.3f GiB in %.1f s", static_cast<double>(total) / kGiB, result.seconds);
  return text + cat(result.files.size(), " files, ", line, "\n");
}

}  // namespace topotrain
