#include <gtest/gtest.h>

#include "topotrain/store/profile_summary.h"

using namespace topotrain;

namespace {

// The table row of `name`, or "" when it is not listed.
std::string row_of(const std::string& text, const std::string& name) {
  std::size_t at = text.find("  " + name + "\n");
  if (at == std::string::npos) return "";
  return text.substr(text.rfind('\n', at) + 1, at - text.rfind('\n', at) - 1);
}

}  // namespace

TEST(ProfileSummary, DeviceBusyShareIsTheUnionOfOverlappingActivities) {
  // Two streams overlap on [10, 30); the device idles on [30, 60) and [70, 90).
  std::vector<ProfiledEvent> events = {
      {"gemm", true, 0, 0, 30},      {"copy", true, 0, 10, 10}, {"gemm", true, 0, 60, 10},
      {"softmax", true, 0, 90, 10},
  };
  const std::string text = summarize_profile(events, 200, "title line");
  EXPECT_EQ(text.rfind("title line\n", 0), 0u);
  // Busy: [0, 30) + [60, 70) + [90, 100) = 50 us of a 200 us step.
  EXPECT_NE(text.find("busy 0.05 ms (25.0% of the wall time)"), std::string::npos) << text;
  EXPECT_NE(text.find("4 activities"), std::string::npos) << text;
  // gemm: 2 calls, 40 us; ranked before copy and softmax.
  const std::string gemm = row_of(text, "gemm");
  ASSERT_FALSE(gemm.empty()) << text;
  EXPECT_NE(gemm.find("0.04"), std::string::npos) << gemm;
  EXPECT_NE(gemm.find(" 2 "), std::string::npos) << gemm;
  EXPECT_LT(text.find("  gemm\n"), text.find("  copy\n"));
  // The longest gap first, with its neighbours.
  const std::size_t gaps = text.find("longest device idle gaps");
  ASSERT_NE(gaps, std::string::npos) << text;
  EXPECT_NE(text.find("0.03 ms at +0.03 ms, after copy / before gemm", gaps), std::string::npos) << text;
  EXPECT_NE(text.find("0.02 ms at +0.07 ms, after gemm / before softmax", gaps), std::string::npos) << text;
}

TEST(ProfileSummary, HostSelfTimeExcludesNestedCallsOfTheSameThread) {
  // Thread 1: linear [0, 100) holds mm [10, 70) which holds a launch [20, 25); thread 2 runs
  // its own call over the same interval, which is not nested in thread 1's.
  std::vector<ProfiledEvent> events = {
      {"aten::linear", false, 1, 0, 100},
      {"aten::mm", false, 1, 10, 60},
      {"cudaLaunchKernel", false, 1, 20, 5},
      {"cudaStreamSynchronize", false, 2, 5, 90},
      {"aten::mm", false, 1, 100, 20},  // starts as linear ends: not nested
  };
  const std::string text = summarize_profile(events, 1000, "t");
  EXPECT_NE(text.find("device: 0 activities"), std::string::npos) << text;
  EXPECT_EQ(text.find("longest device idle gaps"), std::string::npos) << text;
  // linear: 100 - 60 = 40 us; mm: (60 - 5) + 20 = 75 us in 2 calls; sync keeps its 90 us.
  EXPECT_NE(row_of(text, "aten::linear").find("0.04"), std::string::npos) << text;
  EXPECT_NE(row_of(text, "aten::mm").find("0.07"), std::string::npos) << text;
  EXPECT_NE(row_of(text, "aten::mm").find(" 2 "), std::string::npos) << text;
  EXPECT_NE(row_of(text, "cudaStreamSynchronize").find("0.09"), std::string::npos) << text;
  EXPECT_LT(text.find("cudaStreamSynchronize"), text.find("aten::mm"));
}
