// Running a job (moe_train, dflash_train) on every rank: the command line they share,
// loading and validating the run file on all ranks, binding ranks to roles and devices,
// --dry-run, and the failure path.
//
// Failure contract: bad input (ConfigError before the job starts) is detected by every
// rank; rank 0 prints the first rank's message once and all ranks exit 2 together. Any
// exception once the job body runs is printed by the rank that hit it as
// "[rank N role] message" and takes every rank down (MPI_Abort), so no rank is left
// waiting in a collective.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "topotrain/core/run_file.h"
#include "topotrain/core/runtime.h"

namespace topotrain {

struct JobOptions {
  std::string topology_path;
  std::vector<std::string> config_paths;  // --config FILE (repeatable)
  std::vector<std::string> overrides;     // --set key=value (repeatable)
  bool dry_run = false;
  std::string resume;  // "", "auto" or a checkpoint path
};

struct JobContext {
  const JobSpec& job;
  Runtime& runtime;
  const RunFile& run;
  const JobOptions& options;
};

using JobBody = std::function<void(JobContext&)>;

// What the shared command line asks for: run with `options`, or print `output` (to
// stdout) and `error` (to stderr) and exit with `exit_code`: 0 for --help, --version and
// --help-settings, 2 for bad arguments. Options may come before or after the topology
// file; --set and --config take one value each and repeat.
struct CommandLine {
  JobOptions options;
  std::optional<int> exit_code;
  std::string output, error;
};
CommandLine read_command_line(int argc, const char* const* argv, const JobSpec& job);

// read_command_line, then for an exit: print (on the first rank only) and exit.
JobOptions parse_job_options(int argc, char** argv, const JobSpec& job);

// Runs `body` on every rank; returns the process exit code.
int run_job(int argc, char** argv, const JobSpec& job, const JobOptions& options, const JobBody& body);

}  // namespace topotrain
