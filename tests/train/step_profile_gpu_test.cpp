// StepProfile on a GPU: the summary must count the step's kernels and the device's busy time
// (CUPTI through Kineto), not only host calls; device only, it must count them without the
// host's operations.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "topotrain/core/files.h"
#include "topotrain/train/step_profile.h"

using namespace topotrain;

TEST(StepProfileGpu, CountsTheStepsKernels) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  const std::string dir = make_temp_directory("step_profile_gpu");
  const torch::Device device(torch::kCUDA, 0);
  StepProfile profile({1, 1, true}, dir, 0, device);
  {
    auto profiled = profile.step(1);
    auto a = torch::randn({2048, 2048}, torch::TensorOptions().device(device));
    for (int i = 0; i < 8; ++i) a = torch::mm(a, a).tanh();
  }
  std::ifstream in(profile.summary_path());
  std::stringstream text;
  text << in.rdbuf();
  const std::string summary = text.str();
  EXPECT_TRUE(file_exists(dir + "/profile-step1-rank0.json")) << "pip torch has Kineto: a Chrome trace is due";
  EXPECT_NE(summary.find("device activities by total time"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("device: 0 activities"), std::string::npos) << summary;
  EXPECT_NE(summary.find("aten::mm"), std::string::npos) << summary;
  remove_tree(dir);
}

TEST(StepProfileGpu, DeviceOnlyRecordsKernelsOfEveryStepAndNoHostOperation) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  const std::string dir = make_temp_directory("step_profile_gpu");
  const torch::Device device(torch::kCUDA, 0);
  StepProfile profile({2, 2, false}, dir, 0, device);
  const auto options = torch::TensorOptions().device(device);
  for (std::int64_t step = 1; step <= 3; ++step) {
    auto profiled = profile.step(step);
    // A kernel whose count says which steps were recorded: step s launches s + 3 of them.
    auto a = torch::randn({256, 256}, options);
    for (std::int64_t i = 0; i < step + 3; ++i) a = torch::tanh(a);
    // The profile does not drain the device at its start; the test does, so that step 1's
    // kernels are certain to be outside it.
    if (step == 1) torch::cuda::synchronize();
  }
  std::ifstream in(profile.summary_path());
  std::stringstream text;
  text << in.rdbuf();
  const std::string summary = text.str();
  EXPECT_EQ(summary.rfind("profile of steps 2-3, rank 0 on ", 0), 0u) << summary;
  EXPECT_NE(summary.find("(device only)"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("aten::"), std::string::npos) << "host operations were recorded:\n" << summary;
  // Steps 2 and 3 launch 5 + 6 tanh kernels; step 1's 4 ran before the profiler started.
  const auto tanh_line = summary.find("tanh");
  ASSERT_NE(tanh_line, std::string::npos) << summary;
  const std::string line = summary.substr(summary.rfind('\n', tanh_line) + 1,
                                          summary.find('\n', tanh_line) - summary.rfind('\n', tanh_line) - 1);
  EXPECT_NE(line.find(" 11 "), std::string::npos) << line;
  remove_tree(dir);
}
