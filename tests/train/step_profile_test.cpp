#include <gtest/gtest.h>

#include <torch/torch.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "topotrain/core/files.h"
#include "topotrain/train/step_profile.h"

using namespace topotrain;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void some_work() {
  auto a = torch::randn({32, 32});
  torch::mm(a, a).sum();
}

}  // namespace

TEST(StepProfile, ProfilesOnlyTheChosenStepAndWritesItsSummary) {
  const std::string dir = make_temp_directory("step_profile");
  StepProfile profile({2, 1, true}, dir, 3, torch::Device(torch::kCPU));
  for (std::int64_t step = 1; step <= 3; ++step) {
    auto profiled = profile.step(step);
    some_work();
    if (step == 1) {
      EXPECT_TRUE(profile.summary_path().empty());
    }
  }
  ASSERT_EQ(profile.summary_path(), dir + "/profile-step2-rank3.txt");
  const std::string text = read_all(profile.summary_path());
  EXPECT_EQ(text.rfind("profile of step 2, rank 3 on cpu", 0), 0u) << text;
  EXPECT_NE(text.find("aten::mm"), std::string::npos) << text;
  remove_tree(dir);
}

TEST(StepProfile, ProfilesConsecutiveStepsIntoOneSummary) {
  const std::string dir = make_temp_directory("step_profile");
  StepProfile profile({2, 2, true}, dir, 1, torch::Device(torch::kCPU));
  for (std::int64_t step = 1; step <= 4; ++step) {
    {
      auto profiled = profile.step(step);
      some_work();
    }
    // Written when the last requested step's scope ends, not before.
    EXPECT_EQ(profile.summary_path().empty(), step < 3) << "after step " << step;
  }
  const std::string text = read_all(dir + "/profile-step2-rank1.txt");
  EXPECT_EQ(text.rfind("profile of steps 2-3, rank 1 on cpu", 0), 0u) << text;
  EXPECT_NE(text.find("aten::mm"), std::string::npos) << text;
  remove_tree(dir);
}

TEST(StepProfile, ARunEndingInsideTheStepsWritesWhatWasRecorded) {
  const std::string dir = make_temp_directory("step_profile");
  {
    StepProfile profile({2, 5, true}, dir, 0, torch::Device(torch::kCPU));
    for (std::int64_t step = 1; step <= 3; ++step) {
      auto profiled = profile.step(step);
      some_work();
    }
    EXPECT_TRUE(profile.summary_path().empty());
  }
  const std::string text = read_all(dir + "/profile-step2-rank0.txt");
  EXPECT_EQ(text.rfind("profile of steps 2-3, rank 0 on cpu", 0), 0u) << text;
  remove_tree(dir);
}

TEST(StepProfile, DeviceOnlyOnARankWithoutAGpuIsAnError) {
  try {
    StepProfile profile({2, 1, false}, "/nonexistent", 4, torch::Device(torch::kCPU));
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("log.profile_host = false"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 4"), std::string::npos) << what;
  }
  // Without a profiled step the setting is not looked at.
  EXPECT_NO_THROW(StepProfile({0, 1, false}, "/nonexistent", 4, torch::Device(torch::kCPU)));
}

TEST(StepProfile, StepZeroProfilesNothing) {
  StepProfile profile({0, 1, true}, "/nonexistent", 0, torch::Device(torch::kCPU));
  { auto profiled = profile.step(0); }
  EXPECT_TRUE(profile.summary_path().empty());
}

TEST(StepProfile, WarnsWhenTheChosenStepNeverRan) {
  testing::internal::CaptureStderr();
  {
    StepProfile profile({5, 1, true}, "/nonexistent", 0, torch::Device(torch::kCPU));
    for (std::int64_t step = 1; step <= 3; ++step) auto profiled = profile.step(step);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("log.profile_step = 5: this rank never ran step 5"), std::string::npos) << err;
}
