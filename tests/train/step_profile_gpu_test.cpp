// StepProfile on a GPU: the summary must count the step's kernels and the device's busy time
// (CUPTI through Kineto), not only host calls.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "topotrain/core/files.h"
#include "topotrain/train/step_profile.h"

using namespace topotrain;

TEST(StepProfileGpu, CountsTheStepsKernels) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  const std::string dir = make_temp_directory("step_profile_gpu");
  const torch::Device device(torch::kCUDA, 0);
  StepProfile profile(1, dir, 0, device);
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
