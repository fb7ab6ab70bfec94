#include <gtest/gtest.h>

#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "topotrain/core/files.h"
#include "topotrain/train/step_profile.h"

using namespace topotrain;

TEST(StepProfile, ProfilesOnlyTheChosenStepAndWritesItsSummary) {
  const std::string dir = make_temp_directory("step_profile");
  StepProfile profile(2, dir, 3, torch::Device(torch::kCPU));
  for (std::int64_t step = 1; step <= 3; ++step) {
    auto profiled = profile.step(step);
    auto a = torch::randn({32, 32});
    torch::mm(a, a).sum();
    if (step == 1) {
      EXPECT_TRUE(profile.summary_path().empty());
    }
  }
  ASSERT_EQ(profile.summary_path(), dir + "/profile-step2-rank3.txt");
  std::ifstream in(profile.summary_path());
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().rfind("profile of step 2, rank 3 on cpu", 0), 0u) << text.str();
  EXPECT_NE(text.str().find("aten::mm"), std::string::npos) << text.str();
  remove_tree(dir);
}

TEST(StepProfile, StepZeroProfilesNothing) {
  StepProfile profile(0, "/nonexistent", 0, torch::Device(torch::kCPU));
  { auto profiled = profile.step(0); }
  EXPECT_TRUE(profile.summary_path().empty());
}

TEST(StepProfile, WarnsWhenTheChosenStepNeverRan) {
  testing::internal::CaptureStderr();
  {
    StepProfile profile(5, "/nonexistent", 0, torch::Device(torch::kCPU));
    for (std::int64_t step = 1; step <= 3; ++step) auto profiled = profile.step(step);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("log.profile_step = 5: this rank never ran step 5"), std::string::npos) << err;
}
