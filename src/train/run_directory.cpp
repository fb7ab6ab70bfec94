#include "topotrain/train/run_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/io_failure.h"
#include "topotrain/store/checkpoint_file.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/store/run_dir_files.h"
#include "topotrain/store/timings_file.h"
#include "topotrain/train/launch_settings.h"
#include "topotrain/train/metrics_log.h"
#include "topotrain/train/tensorboard_log.h"

namespace topotrain {
namespace {

constexpr const char* kWriteProbePrefix = ".write-probe-";

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// The entries of run_dir that belong to a run: all but the lock, a launch's write probe and
// the folders earlier runs' files were moved into.
std::vector<std::string> run_entries(const std::string& run_dir) {
  std::vector<std::string> names;
  for (const std::string& name : list_directory(run_dir))
    if (name != kRunLockFileName && !starts_with(name, kWriteProbePrefix) && !starts_with(name, kSupersededPrefix))
      names.push_back(name);
  return names;
}

// The step of metrics.jsonl's last complete line (one object per step, appended in step
// order by each launch), read from the file's end; nullopt when no line parses.
std::optional<std::int64_t> last_metrics_step(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff tail = std::min<std::streamoff>(size, 64 * 1024);
  in.seekg(size - tail);
  std::string text(static_cast<std::size_t>(tail), '\0');
  in.read(text.data(), tail);
  // Lines from the last: the very last may be cut short by a kill mid-write.
  for (std::size_t end = text.size(); end > 0;) {
    const std::size_t start = text.rfind('\n', end - 1);
    const std::size_t from = start == std::string::npos ? 0 : start + 1;
    const auto line = nlohmann::json::parse(text.substr(from, end - from), nullptr, /*allow_exceptions=*/false);
    if (line.is_object() && line.contains("step") && line["step"].is_number_integer())
      return line["step"].get<std::int64_t>();
    if (start == std::string::npos) break;
    end = start;
  }
  return std::nullopt;
}

std::string type_of(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return "missing";
  if (S_ISDIR(info.st_mode)) return "a directory";
  if (S_ISFIFO(info.st_mode)) return "a FIFO";
  if (S_ISSOCK(info.st_mode)) return "a socket";
  return "not a regular file";
}

std::string latest_problem(const std::string& run_dir) {
  const std::string path = join_path(run_dir, kLatestFileName);
  if (!file_exists(path) || is_regular_file(path)) return "";
  return cat(path, " is ", type_of(path), ", where a run keeps the name of its newest checkpoint (a one-line file): ",
             "the first checkpoint could not replace it. Move it out of the run directory (it is no file of "
             "topotrain's), then launch again");
}

std::string unwritable(const std::string& run_dir, const std::string& probe, int error) {
  return cat("run directory ", run_dir, " is not writable: cannot create ", probe, ": ", os_error_text(error),
             ". Point checkpoint.dir at a writable directory (--set checkpoint.dir=PATH), or "
             "make ", run_dir, " writable");
}

void check_writable(const std::string& run_dir) {
  const std::string probe = join_path(run_dir, cat(kWriteProbePrefix, ::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int error = errno;
    throw ConfigError(unwritable(run_dir, probe, error));
  }
  ::close(fd);
  if (::unlink(probe.c_str()) != 0) {
    const int error = errno;  // before the message's strings are built
    throw ConfigError(unwritable(run_dir, probe + " (removing it)", error));
  }
}

// Step 4 of the header: "" when the launch may go on.
std::string records_refusal(const std::string& run_dir, const std::string& resume) {
  if (resume == kResumeFresh || !CheckpointReader::list(run_dir).empty()) return "";
  const RunRecords records = read_run_records(run_dir);
  if (!records.trained) return "";
  const std::string launch =
      resume.empty()        ? "a launch without --resume would start a second run on top of them"
      : resume == kResumeAuto ? "--resume auto has no checkpoint to continue from, and starting over here would "
                                "append a second run to those records"
                              : cat("--resume ", resume, " would append another run's training to them");
  return cat(run_dir, " holds the records of a run that trained",
             records.last_step > 0 ? cat(" up to step ", records.last_step) : std::string(), " (",
             records.describe(), ") but no complete checkpoint",
             records.latest_missing ? cat(" (", *records.latest_missing, ")") : std::string(), ": ", launch,
             ". Start over deliberately with --resume fresh, which moves those files into ",
             superseded_folder(run_dir, 0), ", or launch under another checkpoint.run (--set checkpoint.run=NAME)");
}

// Step 5 of the header: "" when run_dir held nothing of a run.
std::string set_aside_for_fresh_start(const std::string& run_dir) {
  const std::vector<std::string> entries = run_entries(run_dir);
  if (entries.empty()) return "";
  const RunRecords records = read_run_records(run_dir);
  const std::string folder = superseded_folder(run_dir, 0);
  try {
    make_directories(folder);
    for (const std::string& name : entries) rename_file(join_path(run_dir, name), join_path(folder, name));
    fsync_path(folder);
    fsync_path(run_dir);
  } catch (const std::exception& e) {
    throw ConfigError(cat("--resume fresh: cannot move the earlier run's files of ", run_dir, " into ", folder, ": ",
                          e.what(), "; move them out of ", run_dir, " yourself and launch again"));
  }
  return cat("--resume fresh: moved the earlier run's ", entries.size(), " files and folders of ", run_dir, " (",
             records.describe(), ") to ", folder,
             ", where this run's cannot mix with them; training starts at step 0. Delete that folder once they "
             "are not needed");
}

}  // namespace

std::string RunRecords::describe() const {
  std::string text;
  for (const std::string& item : found) text += (text.empty() ? "" : ", ") + item;
  return text.empty() ? "nothing" : text;
}

RunRecords read_run_records(const std::string& run_dir) {
  RunRecords records;
  if (!is_directory(run_dir)) return records;
  const std::vector<std::string> entries = run_entries(run_dir);
  auto has = [&](const std::string& name) { return std::binary_search(entries.begin(), entries.end(), name); };
  auto count = [&](auto&& matches) { return std::count_if(entries.begin(), entries.end(), matches); };

  const std::string metrics = join_path(run_dir, kMetricsFileName);
  const bool has_metrics = has(kMetricsFileName);
  if (has(kLogFileName)) records.found.emplace_back(kLogFileName);
  if (has_metrics) {
    const auto step = last_metrics_step(metrics);
    records.last_step = step.value_or(0);
    // A file with lines but none readable: steps unknown, so counted as trained.
    const bool unreadable = !step && file_size(metrics) > 0;
    records.trained = records.last_step > 0 || unreadable;
    records.found.push_back(cat(kMetricsFileName, step       ? cat(" (steps up to ", *step, ")")
                                                  : unreadable ? std::string(" (no step readable)")
                                                               : std::string(" (no step)")));
  }
  for (const std::string& name : {std::string(kTimingsFileName), cat(kTimingsFileName, kTimingsLiveSuffix)}) {
    if (!has(name)) continue;
    records.found.push_back(name);
    records.trained = records.trained || !has_metrics;  // no metrics.jsonl to say: a run's timings
  }
  for (const std::string name : {kSettingsFileName, kTensorBoardDirName}) {
    if (has(name)) records.found.push_back(name);
  }
  const auto steps = count([](const std::string& name) { return checkpoint_step(name).has_value(); });
  if (steps > 0) {
    records.found.push_back(cat(steps, " step-*.h5 file", steps == 1 ? "" : "s"));
    records.trained = true;
  }
  if (has(kLatestFileName)) {
    records.found.emplace_back(kLatestFileName);
    records.trained = true;
    std::ifstream latest(join_path(run_dir, kLatestFileName));
    std::string name;
    if (latest && std::getline(latest, name)) {
      if (!checkpoint_step(name))
        records.latest_missing = cat("`latest` reads \"", name, "\", no step-*.h5 name");
      else if (!checkpoint_file_complete(join_path(run_dir, name)))
        records.latest_missing = cat("`latest` names ", name, ", which is ",
                                     file_exists(join_path(run_dir, name)) ? "incomplete" : "missing");
    }
  }
  const auto others = static_cast<std::int64_t>(entries.size()) -
                      static_cast<std::int64_t>(records.found.size()) - (steps > 0 ? steps - 1 : 0);
  if (others > 0) records.found.push_back(cat(others, " other file", others == 1 ? "" : "s"));
  return records;
}

RunDirectoryClaim claim_run_directory(const std::string& run_dir, const std::string& resume, const LockHolder& me) {
  try {
    make_directories(run_dir);
  } catch (const std::system_error& e) {
    throw ConfigError(cat("run directory ", run_dir, " (checkpoint.dir/checkpoint.run) cannot be created: ",
                          system_error_text(e), ". Point checkpoint.dir at a directory this job can create and write (--set "
                          "checkpoint.dir=PATH)"));
  }
  RunDirectoryClaim claim{RunDirectoryLock::take(run_dir, me), {}};
  if (!claim.lock.warning().empty()) claim.warnings.push_back(claim.lock.warning());
  check_writable(run_dir);
  // Before the shape check: a fresh start moves whatever stands in the way aside as well.
  if (resume == kResumeFresh) {
    const std::string moved = set_aside_for_fresh_start(run_dir);
    if (!moved.empty()) claim.warnings.push_back(moved);
  }
  if (const std::string problem = latest_problem(run_dir); !problem.empty()) throw ConfigError(problem);
  if (const std::string refusal = records_refusal(run_dir, resume); !refusal.empty()) throw ConfigError(refusal);
  return claim;
}

std::vector<std::string> inspect_run_directory(const std::string& run_dir, const std::string& resume) {
  const std::string refused = "a launch now would be refused: ";
  // The nearest existing directory at or above run_dir: where a launch creates it.
  std::string existing = run_dir;
  while (!file_exists(existing) && existing != parent_directory(existing)) existing = parent_directory(existing);
  if (!is_directory(existing))
    return {cat(refused, "run directory ", run_dir, " (checkpoint.dir/checkpoint.run) cannot be created: ", existing,
                " is a file")};
  if (::access(existing.c_str(), W_OK | X_OK) != 0) {
    const int error = errno;
    return {refused + unwritable(run_dir, existing, error)};
  }
  if (existing != run_dir) return {};  // nothing there yet
  std::vector<std::string> notes;
  if (const std::string holder = RunDirectoryLock::refusal_if_held(run_dir); !holder.empty())
    notes.push_back(refused + holder);
  if (resume == kResumeFresh) {
    if (!run_entries(run_dir).empty())
      notes.push_back(cat("--resume fresh: a launch would move the earlier run's files of ", run_dir, " (",
                          read_run_records(run_dir).describe(), ") to ", superseded_folder(run_dir, 0)));
    return notes;
  }
  if (const std::string problem = latest_problem(run_dir); !problem.empty()) notes.push_back(refused + problem);
  else if (const std::string refusal = records_refusal(run_dir, resume); !refusal.empty())
    notes.push_back(refused + refusal);
  return notes;
}

}  // namespace topotrain
