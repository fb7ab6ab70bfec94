#include "topotrain/train/job.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <sstream>

#include <CLI/CLI.hpp>

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/core/settings_reference.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/train/build_info.h"
#include "topotrain/train/job_exit.h"
#include "topotrain/train/run_directory.h"
#include "topotrain/train/run_setup.h"

namespace topotrain {
namespace {

// Before MPI_Init the launcher's environment is the only way to know the rank; used so
// that argument errors print once, not once per rank.
bool first_rank_by_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* value = std::getenv(name)) return std::atoi(value) == 0;
  return true;
}

// Loads and validates everything that can be wrong with the input, on this rank. A
// device this node lacks is an error, except in a dry run, where it is returned as a
// warning: that is how a cluster's topology is checked from a machine without its GPUs.
std::string load_and_validate(Runtime& runtime, const JobSpec& job, const JobOptions& options,
                              const JobInputCheck& check_inputs, RunFile& run, RunConfig& config) {
  run = load_run(options.topology_path, options.config_paths, options.overrides);
  // Roles first: another job's topology file carries that job's settings too, and the roles
  // say what is wrong (the settings would only follow from it).
  validate_topology(run.topology, job);
  run.settings.check_read_by(job.name);
  validate_world(run.topology, runtime.world_size());
  std::string device_warning;
  try {
    validate_device(run.topology, runtime.rank(), runtime.local_rank(), Runtime::gpus_present(),
                    std::getenv("CUDA_VISIBLE_DEVICES"));
  } catch (const ConfigError& e) {
    if (!options.dry_run) throw;
    device_warning = e.what();
  }
  // After the topology's checks: a job's settings are read against the roles it runs.
  config = read_run_config(run, job.name);
  check_inputs(run, config);
  return device_warning;
}

// Who holds the run directory, as a second job there is told.
LockHolder this_launch(const Runtime& runtime, const JobSpec& job, const JobOptions& options) {
  return {runtime.host(), static_cast<std::int64_t>(::getpid()), static_cast<std::int64_t>(std::time(nullptr)),
          cat(job.name, ", ", runtime.world_size(), " ranks, ", options.topology_path)};
}

}  // namespace

std::string resolved_settings_toml(const JobOptions& options, const JobSpec& job) {
  const RunFile run = load_run(options.topology_path, options.config_paths, options.overrides);
  validate_topology(run.topology, job);
  run.settings.check_read_by(job.name);
  read_run_config(run, job.name);  // the checks of the settings alone
  return run.settings.to_toml(job.name);
}

CommandLine read_command_line(int argc, const char* const* argv, const JobSpec& job) {
  CommandLine line;
  JobOptions& options = line.options;
  CLI::App app{job.name + ": topotrain job launched by mpirun, one rank per GPU", job.name};
  bool help_settings = false, version = false;
  app.add_option("topology", options.topology_path, "topology file (TOML), e.g. topology/cpu4.toml");
  // One value per occurrence: a repeatable option would otherwise swallow the topology
  // file that follows it (`--set k=v topology.toml`).
  app.add_option("--config", options.config_paths, "extra settings file (TOML tables only); repeatable")
      ->allow_extra_args(false);
  app.add_option("--set", options.overrides, "override a setting: --set train.token_budget=32768; repeatable")
      ->allow_extra_args(false);
  app.add_flag("--dry-run", options.dry_run,
               "check the run as a launch would, print the rank -> role -> device -> host map and the resolved "
               "settings, and exit");
  bool print_settings = false;
  app.add_flag("--print-settings", print_settings,
               "print the resolved settings this job reads (TOML, usable as a --config file) and exit; no mpirun "
               "needed");
  app.add_option("--resume", options.resume,
                 "resume: 'auto' (the latest checkpoint; a fresh start where the run directory holds no run), "
                 "'fresh' (start over, moving an earlier run's files aside), a checkpoint file or a run directory");
  app.add_flag("--help-settings", help_settings, "list every run setting with its type, default and accepted values");
  app.add_flag("--version", version, "print topotrain's version and the LibTorch, CUDA and NCCL it was built with");
  std::ostringstream out, err;
  try {
    app.parse(argc, argv);
    if (!help_settings && !version && options.topology_path.empty())
      throw CLI::RequiredError("topology (e.g. topology/cpu4.toml)");
  } catch (const CLI::ParseError& e) {
    line.exit_code = app.exit(e, out, err) == 0 ? 0 : 2;
  }
  if (!line.exit_code && version) {
    out << build_info();
    line.exit_code = 0;
  } else if (!line.exit_code && help_settings) {
    out << settings_reference_text(job.name);
    line.exit_code = 0;
  } else if (!line.exit_code && print_settings) {
    try {
      out << resolved_settings_toml(options, job);
      line.exit_code = 0;
    } catch (const ConfigError& e) {
      err << job.name << ": error: " << e.what() << '\n';
      line.exit_code = 2;
    }
  }
  line.output = out.str();
  line.error = err.str();
  return line;
}

JobOptions parse_job_options(int argc, char** argv, const JobSpec& job) {
  CommandLine line = read_command_line(argc, argv, job);
  if (!line.exit_code) return line.options;
  if (first_rank_by_environment()) {
    std::fputs(line.output.c_str(), stdout);
    std::fputs(line.error.c_str(), stderr);
  }
  std::exit(*line.exit_code);
}

int run_job(int argc, char** argv, const JobSpec& job, const JobOptions& options, const JobInputCheck& check_inputs,
            const JobBody& body) {
  Runtime runtime(&argc, &argv);
  install_stop_handlers();

  RunFile run;
  RunConfig config;
  std::string local_error, local_warning;
  try {
    local_warning = load_and_validate(runtime, job, options, check_inputs, run, config);
  } catch (const ConfigError& e) {
    local_error = e.what();
  }
  std::string error = runtime.first_error(local_error);
  if (!error.empty()) {
    exit_on_stop_signal(2);
    if (runtime.rank() == 0) std::fprintf(stderr, "%s: error: %s\n", job.name.c_str(), error.c_str());
    return 2;
  }
  const std::string device_warning = runtime.first_error(local_warning);

  // Rank 0's hold on the run directory, for the launch's whole life (run_directory.h).
  std::optional<RunDirectoryClaim> claim;
  try {
    runtime.bind(run.topology, /*select_device=*/!options.dry_run);
    log_configure(runtime.rank(), runtime.role(), config.log_level, config.log_all_ranks);
    std::string placement = runtime.placement_table();
    if (runtime.rank() == 0) {
      std::printf("%s: topology '%s' (%s), %d ranks, interconnect %s\n%s", job.name.c_str(),
                  run.topology.name.c_str(), run.topology.source.c_str(), runtime.world_size(),
                  to_string(run.topology.interconnect), placement.c_str());
      // A launch writes them to the run directory's settings.toml instead (launch_settings.h).
      if (options.dry_run) std::printf("resolved settings:\n%s", run.settings.to_toml(job.name).c_str());
      std::fflush(stdout);
    }
    if (options.dry_run) {
      if (runtime.rank() == 0 && !device_warning.empty())
        std::fprintf(stderr, "%s: warning: %s (--dry-run goes on; a real run on this node refuses it)\n",
                     job.name.c_str(), device_warning.c_str());
      if (runtime.rank() == 0)
        for (const std::string& note : inspect_run_directory(config.run_dir, options.resume))
          std::fprintf(stderr, "%s: warning: %s\n", job.name.c_str(), note.c_str());
      return 0;
    }
    // Before anything is written into the run directory; a refusal writes nothing there.
    std::string claim_error;
    if (runtime.rank() == 0) {
      try {
        claim = claim_run_directory(config.run_dir, options.resume, this_launch(runtime, job, options));
      } catch (const std::exception& e) {  // ConfigError, or a directory that cannot be listed
        claim_error = e.what();
      }
    }
    claim_error = runtime.first_error(claim_error);
    if (!claim_error.empty()) throw JobExit(2, claim_error);
    if (runtime.rank() == 0) {
      log_run_to_file(config.run_dir);
      for (const std::string& warning : claim->warnings) log_warn(warning);
    }
    JobContext context{job, runtime, run, config, options};
    body(context);
  } catch (const JobExit& e) {
    exit_on_stop_signal(e.code());  // every rank leaves with this code
    if (runtime.rank() == 0) {
      log_error_in_file(e.what());  // the reason the launch ended: log.txt's last line
      std::fprintf(stderr, "%s: %s\n", job.name.c_str(), e.what());
    }
    return e.code();
  } catch (const ConfigError& e) {
    log_error_in_file(e.what());  // where this rank writes log.txt (rank 0, a first drafter)
    claim.reset();                // released in order: the next launch has no leftover lock to report
    runtime.abort(e.what(), 2);
  } catch (const std::exception& e) {
    log_error_in_file(e.what());
    claim.reset();
    runtime.abort(e.what());
  }
  return 0;
}

}  // namespace topotrain
