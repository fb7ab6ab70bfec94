// topotrain-report RUN_DIR: where the time of every step went, per role, from the run's
// timings.h5 (its newest launch, or --launch N; a resumed run also gets one line per
// launch); optionally a Chrome/Perfetto trace and an SVG chart of that launch.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>

#include "topotrain/core/files.h"
#include "topotrain/store/chrome_trace.h"
#include "topotrain/store/phase_chart_svg.h"
#include "topotrain/store/run_report.h"
#include "topotrain/store/timings_file.h"

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
  long long skip = 0;
  int launch = 0;
  app.add_option("run", run, "run directory (holding timings.h5) or a timings .h5 file")->required();
  app.add_option("--trace", trace_path, "write a Chrome/Perfetto trace (JSON) here");
  app.add_option("--plot", plot_path, "write an SVG chart of the phase breakdown over steps here");
  app.add_option("--skip", skip, "leave out each rank's first N steps (warm-up)")->check(CLI::NonNegativeNumber);
  app.add_option("--launch", launch, "analyse this launch of a resumed run (default: the newest)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    const std::string path =
        topotrain::is_directory(run) ? topotrain::join_path(run, topotrain::kTimingsFileName) : run;
    if (!topotrain::file_exists(path))
      throw std::runtime_error(path + " does not exist; pass a run directory of a topotrain job (checkpoint.dir/<run>)");
    const std::vector<topotrain::TimingsData> launches = topotrain::read_timing_launches(path);
    const topotrain::TimingsData* chosen = &launches.back();
    if (launch > 0) {
      chosen = nullptr;
      std::string numbers;
      for (const topotrain::TimingsData& l : launches) {
        if (l.launch == launch) chosen = &l;
        numbers += (numbers.empty() ? "" : ", ") + std::to_string(l.launch);
      }
      if (!chosen)
        throw std::runtime_error(path + " holds no launch " + std::to_string(launch) + " (it holds " + numbers +
                                 "; a launch that recorded no step is not kept)");
    }
    if (launches.size() > 1) {
      std::vector<topotrain::LaunchSummary> summaries;
      for (const topotrain::TimingsData& l : launches) summaries.push_back(topotrain::summarise_launch(l));
      std::printf("%s\nlaunch %d:\n", topotrain::format_launches(summaries).c_str(), chosen->launch);
    }
    const topotrain::TimingsData& data = *chosen;
    std::fputs(topotrain::format_report(topotrain::analyse_timings(data, skip)).c_str(), stdout);
    if (!trace_path.empty()) write_output(trace_path, topotrain::chrome_trace_json(data), "trace");
    if (!plot_path.empty()) write_output(plot_path, topotrain::phase_chart_svg(data, skip), "chart");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "topotrain-report: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
