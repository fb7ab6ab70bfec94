// Finding and loading checkpoints for a resume.
#pragma once

#include <cstdint>
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

  // What --resume asks for: "" or "fresh" (no resume: a fresh start, refused with ConfigError
  // where run_dir already holds a complete checkpoint; "fresh" moved it aside before), "auto" (find_latest, or start fresh with a
  // log line saying so), a checkpoint file, which must exist, or a run directory (its
  // latest, as checkpoint_at). A file or directory outside run_dir is refused, as a fresh
  // start is, where run_dir holds a complete checkpoint. ConfigError otherwise.
  static std::optional<std::string> resolve_resume(const std::string& run_dir, const std::string& resume);

  // The newest complete checkpoint of run_dir below `step`: where --resume auto goes when the
  // one at `step` is damaged.
  static std::optional<std::string> newest_before(const std::string& run_dir, std::int64_t step);

  // The checkpoint a path names where a model's weights are asked for (model.weights,
  // topotrain-export): a *.h5 file as is, or a run directory (one holding `latest`,
  // step-*.h5 files or timings.h5) by find_latest, ConfigError when it holds no complete
  // checkpoint. nullopt when `path` is neither (an HF safetensors directory, say).
  static std::optional<std::string> checkpoint_at(const std::string& path);

  // Loads and validates; ConfigError names the file and what is wrong. Only the tensors
  // whose names start with `tensor_prefix` are read ("model/": without the optimizer state).
  static CheckpointState load(const std::string& path, const CheckpointExpectations& expectations,
                              const std::string& tensor_prefix = "");
  // Everything but the tensors: step, model identity, settings, model config.
  static CheckpointState load_header(const std::string& path);

  // Complete step-*.h5 files of run_dir, lowest step first.
  static std::vector<std::string> list(const std::string& run_dir);
};

}  // namespace topotrain
