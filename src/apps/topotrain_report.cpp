// topotrain-report RUN_DIR: where the time of every step went, per role, from the run's
// timings.h5: every launch of a resumed run stitched into one (run_stitch.h), or the one
// --launch names, with each role's slowest steps and what they ran over in; a resumed run
// also gets one line per launch. Then the throughput model's advice (store/topology_advice.h):
// for a DFlash run the fastest splits of its ranks between targets and drafters, written as a
// topology file with --recommend-topology; for moe_train what more grad_accum would gain.
// Optionally: the run set step by step against another (--compare, store/run_comparison.h), an
// SVG chart of the same steps and a Chrome/Perfetto trace (of one launch: each has its own clock).
// Exit status (tool_cli.h): 0 done, 2 bad arguments (also a --skip that leaves no step), 1 any
// other failure.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <vector>

#include "tool_cli.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/store/chrome_trace.h"
#include "topotrain/store/run_chart_svg.h"
#include "topotrain/store/run_comparison.h"
#include "topotrain/store/run_report.h"
#include "topotrain/store/timings_file.h"
#include "topotrain/store/topology_advice.h"

namespace {

void write_output(const std::string& path, const std::string& text, const char* what) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out.flush()) throw std::runtime_error(std::string("cannot write the ") + what + " to " + path);
  std::printf("%s written to %s\n", what, path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"topotrain-report: per-role step-time breakdown of a topotrain run", "topotrain-report"};
  std::string run;
  std::string trace_path;
  std::string plot_path;
  std::string topology_path;
  long long skip = 0;
  long long slowest = 3;
  std::string launch = "all";
  std::string compare;
  app.add_option("run", run, "run directory (holding timings.h5) or a timings .h5 file")->required();
  app.add_option("--trace", trace_path,
                 "write a Chrome/Perfetto trace (JSON) of the newest launch, or of --launch N, here");
  app.add_option("--plot", plot_path, "write an SVG chart of loss, tokens/s and the phases over the steps here");
  app.add_option("--recommend-topology", topology_path,
                 "write the run's topology re-split to the recommended targets and drafters here (DFlash runs; "
                 "the topology is read from the run's newest checkpoint)");
  app.add_option("--skip", skip, "leave out each rank's first N steps of every launch (warm-up)")
      ->check(topotrain::at_least(0));
  app.add_option("--slowest", slowest,
                 topotrain::cat("name each role's N slowest steps more than ", topotrain::kSlowStepMargin * 100,
                                "% over its p50 step, with the phases that ran over"))
      ->check(topotrain::at_least(0))
      ->capture_default_str();
  app.add_option("--compare", compare,
                 "another run (directory or timings .h5) of the same steps: this run's time against it per role, "
                 "by phase, and the --slowest N steps that differ most, in what");
  app.add_option("--launch", launch,
                 "a resumed run's launches to analyse: all (stitched into one run), last, or a launch number")
      ->capture_default_str();
  return topotrain::run_tool(app, argc, argv, [&] {
    using topotrain::ConfigError;
    using topotrain::cat;
    auto timings_path = [](const std::string& given) {
      const std::string file =
          topotrain::is_directory(given) ? topotrain::join_path(given, topotrain::kTimingsFileName) : given;
      if (!topotrain::file_exists(file))
        throw ConfigError(file + " does not exist; pass a run directory of a topotrain job (checkpoint.dir/<run>)");
      return file;
    };
    const std::string path = timings_path(run);
    const std::vector<topotrain::TimingsData> launches = topotrain::read_timing_launches(path);
    const topotrain::TimingsData* chosen = nullptr;  // null: all, stitched
    if (launch == "last") {
      chosen = &launches.back();
    } else if (launch != "all") {
      char* end = nullptr;
      const long number = std::strtol(launch.c_str(), &end, 10);
      if (launch.empty() || *end != '\0' || number < 1)
        throw ConfigError("--launch " + launch + ": expected all, last or a launch number (1, 2, ...)");
      std::string numbers;
      for (const topotrain::TimingsData& l : launches) {
        if (l.launch == number) chosen = &l;
        numbers += (numbers.empty() ? "" : ", ") + std::to_string(l.launch);
      }
      if (!chosen)
        throw ConfigError(path + " holds no launch " + launch + " (it holds " + numbers +
                          "; a launch that recorded no step is not kept)");
    }
    if (launches.size() > 1) {
      std::vector<topotrain::LaunchSummary> summaries;
      for (const topotrain::TimingsData& l : launches) summaries.push_back(topotrain::summarise_launch(l));
      std::printf("%s\n", topotrain::format_launches(summaries).c_str());
      if (chosen) std::printf("launch %d:\n", chosen->launch);
    }
    const topotrain::TimingsData& traced = chosen ? *chosen : launches.back();
    const std::vector<topotrain::TimingsData> analysed =
        chosen ? std::vector<topotrain::TimingsData>{*chosen} : launches;
    const topotrain::StitchedRun stitched = topotrain::stitch_launches(analysed, skip);
    if (stitched.rows.empty() && skip > 0) {
      std::set<std::int64_t> steps;
      for (const topotrain::StitchedRow& row : topotrain::stitch_launches(analysed, 0).rows) steps.insert(row.step);
      throw ConfigError(cat("--skip ", skip, " leaves out all ", steps.size(), " recorded steps of ", path,
                            " (it drops each rank's first ", skip, " steps of every launch); pass a smaller --skip"));
    }
    const auto report = topotrain::analyse_timings(stitched, static_cast<std::size_t>(slowest));
    std::fputs(topotrain::format_report(report).c_str(), stdout);
    const topotrain::TopologyAdvice advice = topotrain::advise_topology(stitched);
    std::fputs(topotrain::format_topology_advice(advice, 3).c_str(), stdout);
    std::fputs(topotrain::format_accumulation_advice(topotrain::advise_accumulation(stitched)).c_str(), stdout);
    if (!compare.empty()) {
      const std::string other_path = timings_path(compare);
      const topotrain::StitchedRun other =
          topotrain::stitch_launches(topotrain::read_timing_launches(other_path), skip);
      const auto roles = topotrain::compare_runs(stitched, other, static_cast<std::size_t>(slowest));
      std::fputs(topotrain::format_comparison(roles, other_path).c_str(), stdout);
    }
    if (!topology_path.empty()) {
      if (!advice.applicable)
        throw ConfigError("--recommend-topology: " + path + " is " + advice.reason +
                          "; only a DFlash run's split is recommended");
      const std::string run_dir = topotrain::is_directory(run) ? run : topotrain::parent_directory(path);
      const auto checkpoint = topotrain::CheckpointReader::find_latest(run_dir);
      if (!checkpoint)
        throw ConfigError("--recommend-topology: " + run_dir +
                          " holds no complete checkpoint, which is where a run keeps its topology; "
                          "run it until it writes one (checkpoint.every_steps, or its last step)");
      const std::string text = topotrain::CheckpointReader::load_header(*checkpoint).topology_text;
      if (text.empty())
        throw ConfigError("--recommend-topology: " + *checkpoint +
                          " keeps no topology text (an older topotrain wrote it); run a newer build first");
      write_output(topology_path,
                   topotrain::recommended_topology_text(advice, text, "the topology of " + *checkpoint),
                   "recommended topology");
    }
    if (!trace_path.empty()) write_output(trace_path, topotrain::chrome_trace_json(traced), "trace");
    if (!plot_path.empty()) write_output(plot_path, topotrain::run_chart_svg(stitched), "chart");
  });
}
