// train.token_budget = "auto" (budget_probe.h): the search against a known threshold, the
// shrink after an out-of-memory, and the probe on a tiny model on the CPU, which must leave
// weights, gradients and torch's generator as it found them.
#include <mpi.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <set>

#include "topotrain/core/error.h"
#include "topotrain/core/process_memory.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/train/job_exit.h"
#include "topotrain/train/budget_probe.h"
#include "topotrain/train/out_of_memory.h"

using namespace topotrain;

namespace {

// The budget the search must find for a cost with threshold `fits_up_to`: the largest
// multiple of 128 within both, or the whole max when it is below 128.
std::int64_t expected_budget(std::int64_t fits_up_to, std::int64_t max_budget) {
  if (max_budget < kBudgetGranule) return fits_up_to >= max_budget ? max_budget : 0;
  return std::min(fits_up_to, max_budget) / kBudgetGranule * kBudgetGranule;
}

}  // namespace

TEST(SearchTokenBudget, FindsTheLargestFittingMultipleWithinTheLimitInFewProbes) {
  for (std::int64_t max_budget : {std::int64_t{100}, std::int64_t{128}, std::int64_t{3000}, std::int64_t{1} << 20,
                                  std::int64_t{2147483647}}) {
    for (std::int64_t threshold : {std::int64_t{50}, std::int64_t{127}, std::int64_t{128}, std::int64_t{129},
                                   std::int64_t{1000}, std::int64_t{4096}, std::int64_t{5000}, std::int64_t{65535},
                                   std::int64_t{1} << 40}) {
      std::set<std::int64_t> asked;
      const BudgetSearch search = search_token_budget(
          [&](std::int64_t budget) {
            asked.insert(budget);
            return budget <= threshold;
          },
          max_budget);
      SCOPED_TRACE(testing::Message() << "max " << max_budget << ", fits up to " << threshold);
      EXPECT_EQ(search.budget, expected_budget(threshold, max_budget));
      EXPECT_EQ(search.probes, static_cast<int>(asked.size())) << "a candidate was asked twice";
      for (std::int64_t budget : asked) {
        EXPECT_LE(budget, max_budget);
        if (max_budget >= kBudgetGranule) {
          EXPECT_EQ(budget % kBudgetGranule, 0) << budget;
        }
      }
      // Doubling, then bisecting: about two probes per power of two of the range.
      EXPECT_LE(search.probes, 2 * static_cast<int>(std::log2(static_cast<double>(max_budget) / 128 + 1)) + 2);
    }
  }
}

TEST(SearchTokenBudget, NothingFitsAfterOneProbe) {
  const BudgetSearch search = search_token_budget([](std::int64_t) { return false; }, 1 << 20);
  EXPECT_EQ(search.budget, 0);
  EXPECT_EQ(search.probes, 1);
}

// The failing step's peak over the plan scales the per-token part; at most 0.9x.
TEST(MeasuredBudget, ShrinksByWhatTheFailingPeakSays) {
  MeasuredBudget measured;
  const std::int64_t gib = std::int64_t{1} << 30;
  measured.budget = 8192;
  measured.fixed_bytes = gib;
  measured.planned_bytes = 9 * gib;
  // 16 GiB of activations at 8192 tokens where 8 fit: half.
  EXPECT_EQ(measured.after_out_of_memory(8192, 17 * gib).value_or(-1), 4096);
  // A peak below the plan (fragmentation, another process) or unknown (0): 0.9x, rounded down.
  EXPECT_EQ(measured.after_out_of_memory(8192, 5 * gib).value_or(-1), 7296);
  EXPECT_EQ(measured.after_out_of_memory(8192, 0).value_or(-1), 7296);
  EXPECT_EQ(measured.after_out_of_memory(100, 0).value_or(-1), 90);
  // Never below the smallest budget (a token and its target), and none at it.
  EXPECT_EQ(measured.after_out_of_memory(3, 0).value_or(-1), kMinTokenBudget);
  EXPECT_FALSE(measured.after_out_of_memory(kMinTokenBudget, 0).has_value());
  // train.oom = "shrink" asks the measure when there is one, else halves.
  StepConfig step;
  step.shrink_on_oom = true;
  EXPECT_EQ(shrunk_budget(step, 8192).value_or(-1), 4096);
  EXPECT_EQ(shrunk_budget(step, 8192, &measured, 0).value_or(-1), 7296);
  EXPECT_EQ(shrunk_budget(step, 4).value_or(-1), 2);
  EXPECT_FALSE(shrunk_budget(step, 3).has_value());
  EXPECT_EQ(shrunk_budget(step, 3, &measured, 0).value_or(-1), kMinTokenBudget);  // the measure's own floor
  step.shrink_on_oom = false;
  EXPECT_FALSE(shrunk_budget(step, 8192, &measured, 0).has_value());
}

// The worst micro-batch a dataset's samples can fill: the longest (a longer one cut at the
// budget), or the densest in anchors (a drafter's: min(512, L - 1) / L), as many of each
// length as there are, the last cut to fit.
TEST(WorstFill, FillsTheBudgetWithTheSamplesThatScoreHighest) {
  const BudgetBounds bounds{8192, {{100, 3}, {600, 2}, {5000, 1}}};
  EXPECT_EQ(bounds.longest_sample(), 5000);
  EXPECT_EQ(worst_fill(bounds, 1024, longest_first), (std::vector<std::int64_t>{1024}));
  EXPECT_EQ(worst_fill(bounds, 8192, longest_first), (std::vector<std::int64_t>{5000, 600, 600, 100, 100, 100}));
  const auto density = [](std::int64_t length) {
    return std::min(512.0, static_cast<double>(length - 1)) / static_cast<double>(length);
  };
  EXPECT_EQ(worst_fill(bounds, 1024, density), (std::vector<std::int64_t>{100, 100, 100, 600, 124}));
}

// On the CPU: a budget within the limit that the probe measured to fit, and the model as
// it was: the same weights, no gradients, torch's generator where it stood.
TEST(ProbeTokenBudget, FitsTheLimitAndLeavesTheModelAsItWas) {
  model::ModelConfig config = model::ModelConfig::preset("tiny-moe");
  torch::manual_seed(3);
  model::CausalLM net(config);
  std::vector<torch::Tensor> before;
  for (const auto& p : net->parameters()) before.push_back(p.detach().clone());
  torch::manual_seed(11);
  const torch::Tensor draw_expected = [] {
    auto generator = at::detail::getDefaultCPUGenerator();
    const torch::Tensor state = generator.get_state();
    torch::Tensor draw = torch::rand({4});
    generator.set_state(state);
    return draw;
  }();

  StepConfig step;
  step.auto_budget = true;
  step.memory_fraction = 0.9;
  step.memory_limit = std::int64_t{64} << 30;  // far above what 2048 tokens take
  const BudgetBounds bounds{2048, {{2048, 1}}};
  const MeasuredBudget measured =
      probe_token_budget(language_model_stage(*net), step, bounds, torch::Device(torch::kCPU), MPI_COMM_WORLD,
                         MPI_COMM_WORLD);
  EXPECT_EQ(measured.budget, 2048);
  EXPECT_GT(measured.peak_bytes, measured.fixed_bytes);
  EXPECT_LE(measured.peak_bytes, measured.planned_bytes);
  EXPECT_GT(measured.bytes_per_token(), 0);
  EXPECT_EQ(measured.capacity_bytes, step.memory_limit);
  EXPECT_GE(measured.probes, 5);  // 128 .. 2048

  EXPECT_TRUE(torch::equal(torch::rand({4}), draw_expected)) << "the probe moved torch's CPU generator";
  std::size_t i = 0;
  for (const auto& p : net->parameters()) {
    EXPECT_FALSE(p.grad().defined()) << "a gradient was left behind";
    EXPECT_TRUE(torch::equal(p.detach(), before[i++])) << "a weight changed";
  }

  // A limit whose plan holds what 1024 tokens take by that measure: a budget below 2048.
  step.memory_limit = static_cast<std::int64_t>(
      (static_cast<double>(measured.fixed_bytes) + measured.bytes_per_token() * 1024) / 0.9);
  const MeasuredBudget smaller =
      probe_token_budget(language_model_stage(*net), step, bounds, torch::Device(torch::kCPU), MPI_COMM_WORLD,
                         MPI_COMM_WORLD);
  EXPECT_GE(smaller.budget, kBudgetGranule);
  EXPECT_LT(smaller.budget, 2048);
  // Within this rank's own plan (the agreed plan is the smallest rank's).
  EXPECT_LE(smaller.peak_bytes, static_cast<std::int64_t>(0.9 * static_cast<double>(step.memory_limit)));

  step.memory_limit = 1 << 20;  // 1 MiB: less than the process holds already
  try {
    probe_token_budget(language_model_stage(*net), step, bounds, torch::Device(torch::kCPU), MPI_COMM_WORLD,
                         MPI_COMM_WORLD);
    ADD_FAILURE() << "a limit below the smallest candidate was accepted";
  } catch (const JobExit& e) {
    EXPECT_EQ(e.code(), 2);
    EXPECT_NE(std::string(e.what()).find("not even a micro-batch of 128 tokens fits train.memory_fraction = 0.9"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("raise train.memory_limit"), std::string::npos) << e.what();
  }
}

namespace {

// A stage whose micro-batch costs next to nothing, so that what it holds later decides.
BudgetStage queue_bound_stage(double later_bytes_per_token) {
  BudgetStage stage;
  stage.name = "drafter";
  stage.vocab_size = 100;
  stage.worst_first = {longest_first};  // of 64-token samples only
  stage.run = [](const PackedBatch& batch, std::mt19937_64&) { (void)batch.tokens.sum().item<std::int64_t>(); };
  stage.later_bytes_per_token = later_bytes_per_token;
  return stage;
}

}  // namespace

// What a stage holds later per token (a link's queued hidden states) bounds the budget: at
// 1 MiB a token and a plan of what the process holds now plus 1000 MiB, 896 tokens (the
// largest multiple of 128 within it; the process's own few MiB of noise cannot reach the
// next multiple). With two ranks, each its own stage with its own plan, the job agrees on
// the smaller stage's budget and each keeps its own stage's.
TEST(ProbeTokenBudget, WhatAStageHoldsLaterPerTokenBoundsItAndTheJobTakesTheSmallestStage) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm stage_group = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &stage_group);
  const double mib = 1 << 20;
  const std::int64_t room_tokens = rank == 0 ? 1000 : 2000;
  StepConfig step;
  step.auto_budget = true;
  step.memory_fraction = 0.9;
  step.memory_limit =
      static_cast<std::int64_t>((static_cast<double>(resident_set_bytes()) + static_cast<double>(room_tokens) * mib) / 0.9);
  const MeasuredBudget measured = probe_token_budget(queue_bound_stage(mib), step, {1 << 20, {{64, 1 << 14}}},
                                                     torch::Device(torch::kCPU), stage_group, MPI_COMM_WORLD);
  EXPECT_EQ(measured.stage_budget, rank == 0 ? 896 : 1920);
  EXPECT_EQ(measured.budget, 896);
  EXPECT_LE(measured.peak_bytes, measured.planned_bytes);
  EXPECT_NEAR(measured.bytes_per_token(), mib, 0.02 * mib);
  const std::string line = measured.describe();
  EXPECT_NE(line.find("train.token_budget = \"auto\": 896 tokens per micro-batch; drafters: measured peak"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find(rank == 0 ? "the drafters set the budget" : "the drafters alone fit 1920 tokens"),
            std::string::npos)
      << line;
  MPI_Comm_free(&stage_group);
}

// A stop request reaching one rank (rank 0 here) ends the search there at once; every rank
// learns it in the probe's agreement and leaves before the first step, exit 0.
TEST(ProbeTokenBudget, AStopRequestEndsTheSearchOnEveryRank) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  StepConfig step;
  step.auto_budget = true;
  step.memory_fraction = 0.9;
  step.memory_limit = std::int64_t{64} << 30;
  if (rank == 0) request_stop();
  try {
    probe_token_budget(queue_bound_stage(1), step, {1 << 20, {{64, 1 << 14}}}, torch::Device(torch::kCPU),
                       MPI_COMM_WORLD, MPI_COMM_WORLD);
    ADD_FAILURE() << "the probe went on after a stop request";
  } catch (const JobExit& e) {
    EXPECT_EQ(e.code(), 0);
    EXPECT_NE(std::string(e.what()).find("stopped on request while train.token_budget = \"auto\" measured the budget"),
              std::string::npos)
        << e.what();
  }
  clear_stop();
}
