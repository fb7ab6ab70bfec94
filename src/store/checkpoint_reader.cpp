#include "topotrain/store/checkpoint_reader.h"

#include <fstream>
#include <limits>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/log.h"
#include "topotrain/store/checkpoint_file.h"
#include "topotrain/store/run_dir_files.h"

namespace topotrain {

std::optional<std::string> CheckpointReader::find_latest(const std::string& run_dir) {
  std::ifstream latest(join_path(run_dir, kLatestFileName));
  std::string name;
  if (latest && std::getline(latest, name) && checkpoint_step(name)) {
    const std::string path = join_path(run_dir, name);
    if (checkpoint_file_complete(path)) return path;
    log_warn("checkpoint " + path + " named by " + run_dir + "/latest is missing or incomplete; looking for an older one");
  } else if (latest) {
    log_warn(cat(run_dir, "/latest names no step-*.h5 file (it reads \"", name,
                 "\"); looking for the newest complete checkpoint"));
  }
  return newest_before(run_dir, std::numeric_limits<std::int64_t>::max());
}

std::vector<std::string> CheckpointReader::list(const std::string& run_dir) {
  std::vector<std::string> complete;
  for (const auto& [step, path] : checkpoint_files(run_dir))
    if (checkpoint_file_complete(path)) complete.push_back(path);
  return complete;
}

std::optional<std::string> CheckpointReader::resolve_resume(const std::string& run_dir, const std::string& resume) {
  // One run directory holds one run: another run's checkpoints beside its own would be pruned
  // by step number and `latest` would move between the two.
  auto refuse_another_run = [&](const std::string& path) {
    if (same_file(parent_directory(path), run_dir)) return path;
    if (auto latest = find_latest(run_dir))
      throw ConfigError(cat("--resume ", resume, " continues ", path, ", but ", run_dir,
                            " already holds the checkpoints of another run (the latest: ", *latest,
                            "): continue it under another checkpoint.run, or pass --resume auto or one of ", run_dir,
                            "'s checkpoints to continue the run there"));
    return path;
  };
  // "fresh": the job moved an earlier run's files aside first (train/run_directory.h).
  if (resume.empty() || resume == "fresh") {
    if (auto latest = find_latest(run_dir))
      throw ConfigError(cat(run_dir, " already holds the checkpoints of a run (the latest: ", *latest,
                            "): pass --resume auto to continue it, or start afresh under another checkpoint.run, or "
                            "here with --resume fresh (which moves that run's files aside)"));
    return std::nullopt;
  }
  if (resume == "auto") {
    auto latest = find_latest(run_dir);
    if (latest)
      log_info("resuming from " + *latest);
    else
      log_info("--resume auto: no complete checkpoint in " + run_dir + "; starting fresh");
    return latest;
  }
  if (is_directory(resume)) {
    // Another run's directory: its latest checkpoint, as model.weights takes it.
    if (auto latest = checkpoint_at(resume)) return refuse_another_run(*latest);
    throw ConfigError(cat("--resume ", resume, " is a directory but no run directory: pass a step-*.h5 file, a run "
                          "directory or --resume auto"));
  }
  if (!is_regular_file(resume))
    throw ConfigError("--resume " + resume + ": no such checkpoint file; pass a step-*.h5 file or --resume auto");
  return refuse_another_run(resume);
}

std::optional<std::string> CheckpointReader::newest_before(const std::string& run_dir, std::int64_t step) {
  auto files = checkpoint_files(run_dir);
  for (auto it = files.rbegin(); it != files.rend(); ++it)
    if (it->first < step && checkpoint_file_complete(it->second)) return it->second;
  return std::nullopt;
}

std::optional<std::string> CheckpointReader::checkpoint_at(const std::string& path) {
  if (is_regular_file(path) && file_extension(path) == ".h5") return path;
  const bool run_dir = is_directory(path) && (file_exists(join_path(path, kLatestFileName)) || !checkpoint_files(path).empty() ||
                                              file_exists(join_path(path, kTimingsFileName)));
  if (!run_dir) return std::nullopt;
  auto latest = find_latest(path);
  if (!latest)
    throw ConfigError(cat("run directory ", path, " holds no complete checkpoint (step-*.h5); was the run stopped "
                          "before its first checkpoint, or run with checkpoint.every_steps = -1?"));
  return latest;
}

CheckpointState CheckpointReader::load(const std::string& path, const CheckpointExpectations& expectations,
                                       const std::string& tensor_prefix) {
  return read_checkpoint_file(path, expectations, tensor_prefix);
}

CheckpointState CheckpointReader::load_header(const std::string& path) { return read_checkpoint_header(path); }

}  // namespace topotrain
