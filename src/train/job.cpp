#include "topotrain/train/job.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/core/settings.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/train/job_exit.h"
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

void print_settings_help() {
  std::printf("Run settings (TOML tables in the topology file or --config FILE; --set key=value wins):\n\n");
  for (const auto& spec : setting_specs()) {
    std::string def = "unset";
    if (std::holds_alternative<bool>(spec.default_value)) def = std::get<bool>(spec.default_value) ? "true" : "false";
    if (std::holds_alternative<std::int64_t>(spec.default_value))
      def = std::to_string(std::get<std::int64_t>(spec.default_value));
    if (std::holds_alternative<double>(spec.default_value)) def = cat(std::get<double>(spec.default_value));
    if (std::holds_alternative<std::string>(spec.default_value))
      def = "\"" + std::get<std::string>(spec.default_value) + "\"";
    std::printf("  %-24s %-8s %-14s %s\n", spec.key.c_str(),
                spec.type == SettingType::boolean   ? "bool"
                : spec.type == SettingType::integer ? "int"
                : spec.type == SettingType::real    ? "real"
                                                    : "string",
                def.c_str(), spec.help.c_str());
  }
}

// Loads and validates everything that can be wrong with the input, on this rank.
void load_and_validate(Runtime& runtime, const JobSpec& job, const JobOptions& options, RunFile& run) {
  run = load_run(options.topology_path, options.config_paths, options.overrides);
  validate_topology(run.topology, job);
  validate_world(run.topology, runtime.world_size());
  validate_device(run.topology, runtime.rank(), runtime.local_rank(), Runtime::gpus_present());
  parse_log_level(run.settings.string("log.level"));
}

}  // namespace

JobOptions parse_job_options(int argc, char** argv, const JobSpec& job) {
  JobOptions options;
  CLI::App app{job.name + ": topotrain job launched by mpirun, one rank per GPU", job.name};
  bool help_settings = false;
  app.add_option("topology", options.topology_path, "topology file (TOML), e.g. topology/cpu4.toml");
  app.add_option("--config", options.config_paths, "extra settings file (TOML tables only); repeatable");
  app.add_option("--set", options.overrides, "override a setting: --set train.token_budget=32768; repeatable");
  app.add_flag("--dry-run", options.dry_run, "print the rank -> role -> device -> host map and exit");
  app.add_option("--resume", options.resume, "resume: 'auto' (latest checkpoint, or fresh) or a checkpoint file");
  app.add_flag("--help-settings", help_settings, "list every run setting with its type and default");
  try {
    app.parse(argc, argv);
    if (!help_settings && options.topology_path.empty())
      throw CLI::RequiredError("topology (e.g. topology/cpu4.toml)");
  } catch (const CLI::ParseError& e) {
    if (!first_rank_by_environment()) std::exit(e.get_exit_code() == 0 ? 0 : 2);
    int code = app.exit(e);
    std::exit(code == 0 ? 0 : 2);
  }
  if (help_settings) {
    if (first_rank_by_environment()) print_settings_help();
    std::exit(0);
  }
  return options;
}

int run_job(int argc, char** argv, const JobSpec& job, const JobOptions& options, const JobBody& body) {
  Runtime runtime(&argc, &argv);
  install_stop_handlers();

  RunFile run;
  std::string local_error;
  try {
    load_and_validate(runtime, job, options, run);
  } catch (const ConfigError& e) {
    local_error = e.what();
  }
  std::string error = runtime.first_error(local_error);
  if (!error.empty()) {
    if (runtime.rank() == 0) std::fprintf(stderr, "%s: error: %s\n", job.name.c_str(), error.c_str());
    return 2;
  }

  try {
    runtime.bind(run.topology);
    const Settings& settings = run.settings;
    log_configure(runtime.rank(), runtime.role(), parse_log_level(settings.string("log.level")),
                  settings.boolean("log.all_ranks"));
    std::string placement = runtime.placement_table();
    if (runtime.rank() == 0) {
      std::printf("%s: topology '%s' (%s), %d ranks, interconnect %s\n%s", job.name.c_str(),
                  run.topology.name.c_str(), run.topology.source.c_str(), runtime.world_size(),
                  to_string(run.topology.interconnect), placement.c_str());
      std::printf("resolved settings:\n%s", settings.to_toml().c_str());
      std::fflush(stdout);
    }
    if (options.dry_run) return 0;
    if (runtime.rank() == 0) log_run_to_file(run);
    JobContext context{job, runtime, run, options};
    body(context);
  } catch (const JobExit& e) {
    if (runtime.rank() == 0) std::fprintf(stderr, "%s: %s\n", job.name.c_str(), e.what());
    return e.code();
  } catch (const std::exception& e) {
    runtime.abort(e.what());
  }
  return 0;
}

}  // namespace topotrain
