// bench/moe/kernel_table.py (run with /usr/bin/python3, standard library only) on a hand-made
// Chrome trace of two whole steps, whose per-step figures are worked out here by hand: the
// tool reads profiles whose rates the project quotes, so its arithmetic is tested like code.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "../command_output.h"
#include "topotrain/core/files.h"

using namespace topotrain;
using test_support::command_output;

namespace {

nlohmann::json kernel(const std::string& name, double ts, double dur, int correlation = 0) {
  nlohmann::json e = {{"ph", "X"}, {"cat", "kernel"}, {"name", name}, {"ts", ts}, {"dur", dur}, {"tid", 7}};
  if (correlation) e["args"] = {{"correlation", correlation}};
  return e;
}

std::string kernel_table(const nlohmann::json& events, const std::string& dir, const std::string& options = "") {
  const std::string path = dir + "/trace.json";
  std::ofstream(path) << nlohmann::json{{"traceEvents", events}}.dump();
  return command_output("/usr/bin/python3 " + std::string(TOPOTRAIN_SOURCE_DIR) + "/bench/moe/kernel_table.py " +
                        path + " " + options);
}

// The first line of `text` that starts with `prefix`, or "".
std::string line_starting(const std::string& text, const std::string& prefix) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

}  // namespace

TEST(KernelTable, ReadsASeveralStepProfilePerWholeStep) {
  const std::string dir = make_temp_directory("kernel_table");
  // Times in us. A GEMM before the first optimizer kernel belongs to no whole step. Step 1
  // runs from the first AdamW's end (1000) to the second's (72020): gaps of 2, 8 and 10 us.
  // Step 2 ends at 115120: one gap of 100 us, in which the device waited for the GEMM's
  // launch (at 72100, after the gap began at 72020).
  const nlohmann::json events = {
      kernel("gemm_a", -5000, 2000),
      kernel("adamw_kernel", 0, 1000),
      kernel("gemm_a", 1002, 50000),
      kernel("flash_fwd_kernel", 51010, 20000),
      kernel("adamw_kernel", 71020, 1000),
      kernel("gemm_a", 72120, 40000, 7),
      {{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaLaunchKernel"}, {"ts", 72100}, {"dur", 5}, {"tid", 1},
       {"args", {{"correlation", 7}}}},
      kernel("adamw_kernel", 112120, 3000),
  };
  const std::string text = kernel_table(events, dir);
  EXPECT_NE(text.find("2 whole steps"), std::string::npos) << text;
  // Step 1: span 71.02 ms, busy 71.00, idle 0.02; one gap in each of the three shortest bins.
  const std::string step1 = line_starting(text, "   1    71.02");
  EXPECT_NE(step1.find("71.00     0.02  <3 us 1 0.00, <10 us 1 0.01, <50 us 1 0.01; 0 gaps, 0.00 ms"),
            std::string::npos) << text;
  // Step 2: span 43.10, busy 43.00, idle 0.10, all of it waiting for a launch.
  const std::string step2 = line_starting(text, "   2    43.10");
  EXPECT_NE(step2.find("43.00     0.10  <200 us 1 0.10; 1 gaps, 0.10 ms"), std::string::npos) << text;
  // Per step: (50 + 40) / 2 = 45 ms of GEMM (the one before the first step left out), 10 of
  // attention, (1 + 3) / 2 = 2 of optimizer; 57 ms of kernels in a 57.06 ms span.
  // 5 activities in the 2 steps, 2.5 a step; a kind seen in one step only counts 0.5.
  EXPECT_NE(text.find("device span 57.1 ms, kernel time 57.0 ms (100% busy), 2.5 activities"), std::string::npos)
      << text;
  EXPECT_EQ(line_starting(text, "GEMM "), "GEMM                            45.00  78.9%      1") << text;
  EXPECT_EQ(line_starting(text, "attention "), "attention                       10.00  17.5%    0.5") << text;
  EXPECT_EQ(line_starting(text, "optimizer "), "optimizer                        2.00   3.5%      1") << text;
  EXPECT_NE(text.find("no phase ranges in the trace (a device-only profile"), std::string::npos) << text;
  // --calls: the GEMM's call in each whole step, from its step's start (2 us and 100 us in).
  const std::string calls = kernel_table(events, dir, "--calls gemm");
  EXPECT_NE(calls.find("   1     0.00   50000.0  #0 gemm_a\n   2     0.10   40000.0  #0 gemm_a\n"), std::string::npos)
      << calls;
  remove_tree(dir);
}

TEST(KernelTable, ReadsAOneStepProfileWhole) {
  const std::string dir = make_temp_directory("kernel_table");
  // One optimizer kernel: the whole trace is the step, 2 + 1 ms of kernels in a 4 ms span.
  const nlohmann::json events = {kernel("gemm_a", 0, 2000), kernel("adamw_kernel", 3000, 1000)};
  const std::string text = kernel_table(events, dir);
  EXPECT_EQ(text.find("whole steps"), std::string::npos) << text;
  EXPECT_NE(text.find("device span 4.0 ms, kernel time 3.0 ms (75% busy), 2 activities"), std::string::npos) << text;
  EXPECT_NE(text.find("idle gaps >= 20 us: 1, 1.0 ms in all"), std::string::npos) << text;
  remove_tree(dir);
}
