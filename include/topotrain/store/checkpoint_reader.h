// Finding and loading checkpoints for a resume.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "topotrain/store/checkpoint_state.h"

namespace topotrain {

class CheckpointReader {
 public:
  // The newest complete checkpoint of run_dir: the one `latest` names when it is complete,
  // else the highest-step complete step-*.h5 (temporary .tmp files are never taken).
  static std::optional<std::string> find_latest(const std::string& run_dir);

  // What --resume asks for: "" (no resume), "auto" (find_latest, or start fresh with a
  // log line saying so) or a checkpoint file, which must exist (ConfigError otherwise).
  static std::optional<std::string> resolve_resume(const std::string& run_dir, const std::string& resume);

  // Loads and validates; ConfigError names the file and what is wrong.
  static CheckpointState load(const std::string& path, const CheckpointExpectations& expectations);

  // Complete step-*.h5 files of run_dir, lowest step first.
  static std::vector<std::string> list(const std::string& run_dir);
};

}  // namespace topotrain
