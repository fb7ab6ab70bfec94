// Running a job (moe_train, dflash_train) on every rank: the command line they share,
// loading and validating the run file on all ranks, binding ranks to roles and devices,
// --dry-run, and the failure path.
//
// Failure contract: bad input (ConfigError before the job starts: the run file, the
// settings, the job's own input checks) is detected by every rank, also in --dry-run;
// rank 0 prints the first rank's message once and all ranks exit 2 together, quietly.
// Any exception once the job body runs is printed by the rank that hit it as
// "[rank N role] message" and takes every rank down (MPI_Abort; exit 2 for a
// ConfigError, 1 otherwise), so no rank is left waiting in a collective. A rank that
// never arrives (stopped, wedged) is named by the trainers' watchdog after
// train.hang_timeout_s (exit 5), and a rank that died by a survivor (exit 1):
// comm/watchdog.h.
//
// Before the body, rank 0 claims the run directory (train/run_directory.h: its lock, its
// shape, its records against --resume) before anything is written there; a refusal ends
// every rank with exit 2 and one message, like bad input.
//
// --dry-run of a topology whose GPUs this node lacks (a login node, a laptop) prints the
// map and the settings with a warning and exits 0; a real run refuses it. What a launch
// would refuse in the run directory (a job holding it, ...) is a warning there too: a dry
// run reads the directory and writes and locks nothing.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "topotrain/core/run_file.h"
#include "topotrain/core/runtime.h"
#include "topotrain/train/run_config.h"

namespace topotrain {

struct JobOptions {
  std::string topology_path;
  std::vector<std::string> config_paths;  // --config FILE (repeatable)
  std::vector<std::string> overrides;     // --set key=value (repeatable)
  bool dry_run = false;
  std::string resume;  // "", "auto", "fresh" or a checkpoint path
};

struct JobContext {
  const JobSpec& job;
  Runtime& runtime;
  const RunFile& run;
  const RunConfig& config;  // the run's settings, read once
  const JobOptions& options;
};

using JobBody = std::function<void(JobContext&)>;
// Checks of the run's inputs that need no device and no collective, made on every rank
// before the body starts: the dataset's header against the model, the token budget
// against memory. Throws ConfigError.
using JobInputCheck = std::function<void(const RunFile&, const RunConfig&)>;

// What the shared command line asks for: run with `options`, or print `output` (to
// stdout) and `error` (to stderr) and exit with `exit_code`: 0 for --help, --version and
// --help-settings and --print-settings, 2 for bad arguments or settings. Options may come
// before or after the topology file; --set and --config take one value each and repeat.
struct CommandLine {
  JobOptions options;
  std::optional<int> exit_code;
  std::string output, error;
};
CommandLine read_command_line(int argc, const char* const* argv, const JobSpec& job);

// --print-settings: the resolved settings `job` reads as TOML (Settings::to_toml), after the
// checks that need neither MPI nor the dataset. Throws ConfigError.
std::string resolved_settings_toml(const JobOptions& options, const JobSpec& job);

// read_command_line, then for an exit: print (on the first rank only) and exit.
JobOptions parse_job_options(int argc, char** argv, const JobSpec& job);

// Runs `body` on every rank; returns the process exit code.
int run_job(int argc, char** argv, const JobSpec& job, const JobOptions& options, const JobInputCheck& check_inputs,
            const JobBody& body);

}  // namespace topotrain
