#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "../command_output.h"
#include "topotrain/core/files.h"
#include "topotrain/store/timing_log.h"
#include "topotrain/store/timings_file.h"

using namespace topotrain;

namespace {

// One directory for all ranks of this run, created by rank 0.
std::string shared_dir(const char* test) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string dir = rank == 0 ? make_temp_directory(std::string("topotrain-timings-") + test + "-") : "";
  int length = static_cast<int>(dir.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  dir.resize(static_cast<std::size_t>(length));
  MPI_Bcast(dir.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  return dir;
}

std::string role_of(int rank, int world) { return rank == world - 1 ? "drafter" : "target"; }

// topotrain-report's output for `arguments`; expects the exit status `status`.
std::string run_report(const std::string& arguments, int status = 0) {
  return test_support::command_output(std::string(TOPOTRAIN_REPORT_BINARY) + " " + arguments, status);
}

}  // namespace

TEST(TimingLog, HoldsEveryRankAndStep) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string dir = shared_dir("every");
  constexpr int kSteps = 7, kEvery = 3;
  {
    TimingLogConfig config;
    config.gather_every = kEvery;
    config.flops_per_token = 1e9 * (rank + 1);
    config.device_group = rank - rank % 2;  // as if ranks 0 and 1 shared a GPU, 2 and 3 another
    config.extra_fields = {"queue_depth_send"};
    TimingLog log(dir, MPI_COMM_WORLD, role_of(rank, world), config);
    for (int step = 0; step < kSteps; ++step) {
      log.timer().begin_step(step);
      { auto t = log.timer().scope(Phase::forward); }
      { auto t = log.timer().scope(rank == world - 1 ? Phase::recv : Phase::send); }
      StepMetrics metrics;
      metrics.tokens = 100.0 * rank + step;
      metrics.loss = 1.0 / (step + 1);
      metrics.extra = {double(step % 2)};
      metrics.flops = 1e9 * step;
      metrics.checkpoint_writing = step % 3 == 1;
      log.end_step(metrics);
      if (step == kEvery - 1 && rank == 0) {
        // Each shipment reaches the disk: another reader sees it before the run ends.
        TimingsData so_far = read_timings(log.path());
        EXPECT_GE(so_far.steps.rows, static_cast<std::size_t>(kEvery));
      }
    }
    log.flush();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    TimingsData data = read_timings(dir + "/timings.h5");
    EXPECT_EQ(data.world_size, world);
    ASSERT_EQ(data.roles.size(), static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) EXPECT_EQ(data.roles[r], role_of(r, world));
    ASSERT_EQ(data.ranks.rows, static_cast<std::size_t>(world));
    for (std::size_t row = 0; row < data.ranks.rows; ++row) {
      const double of_rank = data.ranks.at(row, data.ranks.column("rank"));
      EXPECT_EQ(data.ranks.at(row, data.ranks.column("flops_per_token")), 1e9 * (of_rank + 1));
      EXPECT_EQ(data.ranks.at(row, data.ranks.column("device_group")), of_rank - std::fmod(of_rank, 2));
    }
    const TableData& steps = data.steps;
    ASSERT_EQ(steps.rows, static_cast<std::size_t>(kSteps * world));
    std::set<std::pair<int, int>> seen;
    for (std::size_t row = 0; row < steps.rows; ++row) {
      const int r = static_cast<int>(steps.at(row, steps.column("rank")));
      const int s = static_cast<int>(steps.at(row, steps.column("step")));
      EXPECT_TRUE(seen.insert({r, s}).second) << "rank " << r << " step " << s << " twice";
      EXPECT_EQ(steps.at(row, steps.column("tokens")), 100.0 * r + s);
      EXPECT_EQ(steps.at(row, steps.column("loss")), 1.0 / (s + 1));
      EXPECT_EQ(steps.at(row, steps.column("queue_depth_send")), double(s % 2));
      EXPECT_EQ(steps.at(row, steps.column("flops")), 1e9 * s);
      EXPECT_EQ(steps.at(row, steps.column("checkpoint_writing")), s % 3 == 1 ? 1.0 : 0.0);
      EXPECT_TRUE(std::isnan(steps.at(row, steps.column("lr"))));
      const double wall = steps.at(row, steps.column("wall"));
      const double named = steps.at(row, steps.column("forward")) + steps.at(row, steps.column("send")) +
                           steps.at(row, steps.column("recv"));
      EXPECT_NEAR(steps.at(row, steps.column("other")), wall - named, 1e-12);
      EXPECT_EQ(r == world - 1 ? steps.at(row, steps.column("send")) : steps.at(row, steps.column("recv")), 0.0);
    }
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(kSteps * world));
    EXPECT_EQ(data.spans.rows, static_cast<std::size_t>(2 * kSteps * world));
    EXPECT_EQ(data.span_phases.size(), kPhaseCount);
    EXPECT_EQ(data.nvml.rows, 0u);  // no device sampled
    remove_tree(dir);
  }
}

TEST(TimingLog, FlushLocalNeedsNoOtherRank) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string dir = shared_dir("local");
  {
    TimingLogConfig config;
    config.gather_every = 100;
    TimingLog log(dir, MPI_COMM_WORLD, role_of(rank, world), config);
    for (int step = 0; step < 4; ++step) {
      log.timer().begin_step(step);
      log.end_step({});
    }
    // The failure path: only rank 0 writes, without waiting for anyone.
    if (rank == 0) {
      log.flush_local();
      EXPECT_EQ(read_timings(log.path()).steps.rows, 4u);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) remove_tree(dir);
}

// A user watches a long run: while the log is open (and written to), another process reads
// the rows flushed so far, and so does this one.
TEST(TimingLog, ARunningLogIsReadableByAnotherProcess) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string dir = shared_dir("running");
  {
    TimingLogConfig config;
    config.gather_every = 2;
    TimingLog log(dir, MPI_COMM_WORLD, role_of(rank, world), config);
    for (int step = 1; step <= 2; ++step) {
      log.timer().begin_step(step);
      { auto t = log.timer().scope(Phase::forward); }
      StepMetrics metrics;
      metrics.tokens = 10;
      log.end_step(metrics);  // the second ships: rank 0 writes its own rows at once
    }
    if (rank == 0) {
      const std::string text = run_report(dir);
      EXPECT_NE(text.find("role target (rank"), std::string::npos) << text;
      EXPECT_NE(text.find("steps 1..2"), std::string::npos) << text;
      EXPECT_GE(read_timings(log.path()).steps.rows, 2u);
    }
    log.flush();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_EQ(read_timings(join_path(dir, kTimingsFileName)).steps.rows, static_cast<std::size_t>(2 * world));
    EXPECT_FALSE(file_exists(join_path(dir, std::string(kTimingsFileName) + kTimingsLiveSuffix)));
    remove_tree(dir);
  }
}

namespace {

// One launch of a job that records `steps` steps with `tokens` tokens each.
void run_launch(const std::string& dir, int steps, double tokens) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  TimingLogConfig config;
  config.gather_every = 100;
  TimingLog log(dir, MPI_COMM_WORLD, role_of(rank, world), config);
  for (int step = 1; step <= steps; ++step) {
    log.timer().begin_step(step);
    StepMetrics metrics;
    metrics.tokens = tokens;
    log.end_step(metrics);
  }
  log.flush();
}

// Tokens of each launch in the file, oldest first, with the launch numbers.
std::vector<std::pair<int, double>> launch_tokens(const std::string& path) {
  std::vector<std::pair<int, double>> out;
  for (const TimingsData& launch : read_timing_launches(path)) {
    double tokens = 0;
    for (std::size_t row = 0; row < launch.steps.rows; ++row)
      tokens += launch.steps.at(row, launch.steps.column("tokens"));
    out.emplace_back(launch.launch, tokens);
  }
  return out;
}

}  // namespace

// Every launch of a resumed run lands in the one timings.h5, oldest first and numbered;
// the root is the newest launch, and a launch that recorded no step is not kept.
TEST(TimingLog, AResumedRunKeepsEveryLaunchInOneFile) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string dir = shared_dir("launches");
  const std::string published = join_path(dir, kTimingsFileName);
  run_launch(dir, 2, 1);
  run_launch(dir, 0, 0);  // died before its first step
  run_launch(dir, 3, 10);
  run_launch(dir, 1, 100);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    const std::vector<std::pair<int, double>> expected = {{1, 2.0 * world}, {3, 30.0 * world}, {4, 100.0 * world}};
    EXPECT_EQ(launch_tokens(published), expected);
    EXPECT_EQ(read_timings(published).launch, 4);
    EXPECT_EQ(read_timings(published).steps.rows, static_cast<std::size_t>(world));
    EXPECT_EQ(list_directory(dir), std::vector<std::string>{kTimingsFileName});
    const std::string history = run_report(dir);
    EXPECT_NE(history.find("3 launches (a resumed run)"), std::string::npos) << history;
    EXPECT_NE(history.find("launches 1, 3, 4 stitched into one run"), std::string::npos) << history;
    EXPECT_NE(run_report(dir + " --launch last").find("launch 4:"), std::string::npos);
    EXPECT_NE(run_report(dir + " --launch 3").find("steps 1..3"), std::string::npos);
    EXPECT_NE(run_report(dir + " --launch 2", 2).find("holds no launch 2 (it holds 1, 3, 4;"), std::string::npos);
    remove_tree(dir);
  }
}

void copy_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
  ASSERT_TRUE(in && out.flush()) << from << " -> " << to;
}

// Separate timings.N.h5 files, as older versions kept them, are folded in, in order, and
// removed. A start-up killed after its new live file was complete but before it removed
// them leaves both: the next one keeps every launch once. And a killed run's live file,
// which holds more rows than the copy it published, is the log that is kept.
TEST(TimingLog, OldSeparateLogsAndAKilledStartUpKeepEveryLaunchOnce) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string dir = shared_dir("killed");
  const std::string published = join_path(dir, kTimingsFileName);
  const std::string separate = join_path(dir, "timings.1.h5");
  const std::string first_launch = dir + ".first.h5";
  run_launch(dir, 1, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    copy_file(published, first_launch);
    rename_file(published, separate);  // as an older version left it
  }
  run_launch(dir, 2, 10);  // folds timings.1.h5
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_FALSE(file_exists(separate));
    // The kill: the complete live file, the separate log not yet removed, an older copy.
    rename_file(published, published + kTimingsLiveSuffix);
    copy_file(first_launch, separate);
    copy_file(first_launch, published);
    remove_file(first_launch);
  }
  run_launch(dir, 0, 0);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    const std::vector<std::pair<int, double>> expected = {{1, 1.0 * world}, {2, 20.0 * world}, {3, 0.0}};
    EXPECT_EQ(launch_tokens(published), expected);
    EXPECT_EQ(list_directory(dir), std::vector<std::string>{kTimingsFileName});
    remove_tree(dir);
  }
}

// Pipeline stages run at their own pace: ranks that record different numbers of steps
// still meet only in flush(), and every row reaches the file.
TEST(TimingLog, RanksMayRecordDifferentStepCounts) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string dir = shared_dir("uneven");
  auto steps_of = [](int r) { return 3 + 5 * r; };
  {
    TimingLogConfig config;
    config.gather_every = 2;
    TimingLog log(dir, MPI_COMM_WORLD, role_of(rank, world), config);
    for (int step = 0; step < steps_of(rank); ++step) {
      log.timer().begin_step(step);
      StepMetrics metrics;
      metrics.tokens = rank;
      log.end_step(metrics);
    }
    log.flush();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    const TableData steps = read_timings(dir + "/timings.h5").steps;
    std::vector<int> per_rank(static_cast<std::size_t>(world), 0);
    for (std::size_t row = 0; row < steps.rows; ++row) {
      const int r = static_cast<int>(steps.at(row, steps.column("rank")));
      EXPECT_EQ(steps.at(row, steps.column("tokens")), double(r));
      ++per_rank[static_cast<std::size_t>(r)];
    }
    for (int r = 0; r < world; ++r) EXPECT_EQ(per_rank[static_cast<std::size_t>(r)], steps_of(r)) << "rank " << r;
    remove_tree(dir);
  }
}
