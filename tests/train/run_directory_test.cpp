// Claiming a run directory (run_directory.h): one job at a time, a lock left by a killed job
// taken over with a warning naming it, records without a checkpoint refused unless --resume
// fresh moves them aside, and a directory of the wrong shape refused with the OS's reason.
#include "topotrain/train/run_directory.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"

namespace topotrain {
namespace {

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

LockHolder me() { return {"this-host", static_cast<std::int64_t>(::getpid()), 1700000000, "moe_train, 2 ranks, t.toml"}; }

std::string refusal(const std::string& run_dir, const std::string& resume) {
  try {
    claim_run_directory(run_dir, resume, me());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

class RunDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = make_temp_directory("run-directory-");
    run_ = root_ + "/run";
  }
  void TearDown() override { remove_tree(root_); }
  // The records a run leaves: log.txt, metrics.jsonl up to `steps`, timings.h5.
  void write_records(int steps) {
    make_directories(run_);
    write_text(run_ + "/log.txt", "a line\n");
    std::string metrics;
    for (int step = 1; step <= steps; ++step) metrics += "{\"launch\":1,\"loss\":5.0,\"step\":" + std::to_string(step) + "}\n";
    write_text(run_ + "/metrics.jsonl", metrics);
    write_text(run_ + "/timings.h5", "not read");
  }
  std::string root_, run_;
};

TEST_F(RunDirectoryTest, RecordsReadCheaply) {
  EXPECT_FALSE(read_run_records(run_).trained);
  write_records(3);
  RunRecords records = read_run_records(run_);
  EXPECT_TRUE(records.trained);
  EXPECT_EQ(records.last_step, 3);
  EXPECT_EQ(records.describe(), "log.txt, metrics.jsonl (steps up to 3), timings.h5");
  // A line cut short by a kill: the one before it counts.
  std::ofstream(run_ + "/metrics.jsonl", std::ios::app) << "{\"launch\":1,\"st";
  EXPECT_EQ(read_run_records(run_).last_step, 3);
  // A launch that ended before its first step trained nothing to mix with.
  write_text(run_ + "/metrics.jsonl", "");
  EXPECT_FALSE(read_run_records(run_).trained);
  write_text(run_ + "/latest", "step-00000004.h5\n");
  records = read_run_records(run_);
  EXPECT_TRUE(records.trained);
  ASSERT_TRUE(records.latest_missing);
  EXPECT_EQ(*records.latest_missing, "`latest` names step-00000004.h5, which is missing");
}

TEST_F(RunDirectoryTest, OneJobAtATime) {
  auto first = claim_run_directory(run_, "", me());
  EXPECT_TRUE(first.lock.held());
  EXPECT_TRUE(first.warnings.empty());
  const std::string refused = refusal(run_, "auto");
  for (const std::string& part :
       {"run directory " + run_ + " is in use by another job: pid " + std::to_string(::getpid()) +
            " on host this-host (moe_train, 2 ranks, t.toml) since ",
        std::string("another checkpoint.run"), std::string("--resume auto")})
    EXPECT_NE(refused.find(part), std::string::npos) << refused << "\nlacks: " << part;
  EXPECT_EQ(inspect_run_directory(run_, "auto").at(0), "a launch now would be refused: " + refused);
}

// A job killed while it holds the directory: the next one takes it over, naming it.
TEST_F(RunDirectoryTest, LockOfAKilledJobTakenOver) {
  make_directories(run_);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    LockHolder holder = me();
    holder.pid = ::getpid();
    auto claim = claim_run_directory(run_, "", holder);
    ::_exit(claim.lock.held() ? 0 : 1);  // no destructor: the kernel releases the lock
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(inspect_run_directory(run_, "").empty());  // free, though its name is in the file

  auto claim = claim_run_directory(run_, "", me());
  ASSERT_EQ(claim.warnings.size(), 1u);
  const std::string& warning = claim.warnings[0];
  EXPECT_NE(warning.find("took over the run directory from pid " + std::to_string(child) + " on host this-host"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find("ended without releasing it (killed or aborted): pid " + std::to_string(child) + " is gone"),
            std::string::npos)
      << warning;
}

TEST_F(RunDirectoryTest, RecordsWithoutCheckpointRefusedUnlessFresh) {
  write_records(3);
  for (const std::string resume : {"auto", "", "other/step-00000002.h5"}) {
    const std::string refused = refusal(run_, resume);
    for (const std::string& part :
         {run_ + " holds the records of a run that trained up to step 3 (log.txt, metrics.jsonl (steps up to 3), "
                 "timings.h5) but no complete checkpoint",
          "--resume fresh, which moves those files into " + run_ + "/superseded-after-step-00000000",
          std::string("another checkpoint.run")})
      EXPECT_NE(refused.find(part), std::string::npos) << resume << ": " << refused << "\nlacks: " << part;
  }
  EXPECT_EQ(read_text(run_ + "/log.txt"), "a line\n");  // refusals touch nothing

  auto claim = claim_run_directory(run_, "fresh", me());
  ASSERT_EQ(claim.warnings.size(), 1u);
  EXPECT_NE(claim.warnings[0].find("--resume fresh: moved the earlier run's 3 files and folders of " + run_),
            std::string::npos)
      << claim.warnings[0];
  const std::string aside = run_ + "/superseded-after-step-00000000";
  for (const char* name : {"log.txt", "metrics.jsonl", "timings.h5"}) {
    EXPECT_TRUE(file_exists(aside + "/" + name)) << name;
    EXPECT_FALSE(file_exists(run_ + "/" + name)) << name;
  }
  claim = RunDirectoryClaim{};  // released
  // Started over a second time: the next folder, the first one left alone.
  write_records(1);
  claim = claim_run_directory(run_, "fresh", me());
  EXPECT_TRUE(file_exists(aside + "-2/metrics.jsonl"));
  EXPECT_TRUE(file_exists(aside + "/metrics.jsonl"));
}

TEST_F(RunDirectoryTest, ShapeCheckedBeforeTraining) {
  make_directories(run_ + "/latest");
  std::string refused = refusal(run_, "auto");
  EXPECT_NE(refused.find(run_ + "/latest is a directory, where a run keeps the name of its newest checkpoint"),
            std::string::npos)
      << refused;
  EXPECT_EQ(inspect_run_directory(run_, "auto").at(0), "a launch now would be refused: " + refused);
  // --resume fresh moves it aside with the rest.
  EXPECT_NO_THROW(claim_run_directory(run_, "fresh", me()));

  write_text(root_ + "/file", "x");
  refused = refusal(root_ + "/file/run", "");
  EXPECT_NE(refused.find("run directory " + root_ + "/file/run (checkpoint.dir/checkpoint.run) cannot be created"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("is a file: Not a directory (ENOTDIR)"), std::string::npos) << refused;
}

}  // namespace
}  // namespace topotrain
