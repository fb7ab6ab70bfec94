#include "topotrain/store/checkpoint_reader.h"

#include <fstream>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/log.h"
#include "topotrain/store/checkpoint_file.h"
#include "topotrain/store/run_dir_files.h"

namespace topotrain {

std::optional<std::string> CheckpointReader::find_latest(const std::string& run_dir) {
  std::ifstream latest(join_path(run_dir, "latest"));
  std::string name;
  if (latest && std::getline(latest, name) && checkpoint_step(name)) {
    const std::string path = join_path(run_dir, name);
    if (checkpoint_file_complete(path)) return path;
    log_warn("checkpoint " + path + " named by " + run_dir + "/latest is missing or incomplete; looking for an older one");
  }
  auto files = checkpoint_files(run_dir);
  for (auto it = files.rbegin(); it != files.rend(); ++it)
    if (checkpoint_file_complete(it->second)) return it->second;
  return std::nullopt;
}

std::vector<std::string> CheckpointReader::list(const std::string& run_dir) {
  std::vector<std::string> complete;
  for (const auto& [step, path] : checkpoint_files(run_dir))
    if (checkpoint_file_complete(path)) complete.push_back(path);
  return complete;
}

std::optional<std::string> CheckpointReader::resolve_resume(const std::string& run_dir, const std::string& resume) {
  if (resume.empty()) return std::nullopt;
  if (resume == "auto") {
    auto latest = find_latest(run_dir);
    if (latest)
      log_info("resuming from " + *latest);
    else
      log_info("--resume auto: no complete checkpoint in " + run_dir + "; starting fresh");
    return latest;
  }
  if (!is_regular_file(resume))
    throw ConfigError("--resume " + resume + ": no such checkpoint file; pass a step-*.h5 file or --resume auto");
  return resume;
}

CheckpointState CheckpointReader::load(const std::string& path, const CheckpointExpectations& expectations) {
  return read_checkpoint_file(path, expectations);
}

}  // namespace topotrain
