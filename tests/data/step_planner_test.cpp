// Data-parallel dealing: every sample once per epoch for 1, 2 and 4 ranks, identical step
// totals on every rank, and exact continuation after restoring a position with another
// token_budget, grad_accum or world size. Ranks are simulated in one process: the plan
// needs no communication.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "topotrain/data/sample_order.h"
#include "topotrain/data/step_planner.h"

namespace topotrain::data {
namespace {

struct Layout {
  uint64_t budget;
  int world;
  int accum;
};

// A token range of a sample, as read back from a PackedBatch.
struct Range {
  int64_t sample, begin, end;
  bool operator==(const Range& o) const { return sample == o.sample && begin == o.begin && end == o.end; }
};

std::shared_ptr<const TokenDataset> mixed_dataset(bool with_mask = false) {
  std::mt19937 rng(5);
  TokenDatasetContents c;
  c.vocab_size = 50;
  for (int d = 0; d < 61; ++d) {
    const uint64_t length = d % 7 == 0 ? 40 + rng() % 60 : 1 + rng() % 20;  // some far over the budgets
    for (uint64_t i = 0; i < length; ++i) c.tokens.push_back(static_cast<uint32_t>(rng() % 50));
    c.offsets.push_back(c.tokens.size());
  }
  for (size_t t = 0; with_mask && t < c.tokens.size(); ++t) c.loss_mask.push_back(rng() % 3 == 0 ? 0 : 1);
  return std::make_shared<const TokenDataset>(TokenDataset::from_contents(std::move(c), "mixed"));
}

std::vector<Range> ranges_of(const PackedBatch& b) {
  std::vector<Range> out;
  const auto cu = b.cu_seqlens.accessor<int32_t, 1>();
  const auto ids = b.sample_ids.accessor<int64_t, 1>();
  const auto pos = b.positions.accessor<int64_t, 1>();
  for (int64_t i = 0; i < b.num_sequences(); ++i) {
    out.push_back(Range{ids[i], pos[cu[i]], pos[cu[i]] + (cu[i + 1] - cu[i])});
  }
  return out;
}

// Tokens of the batch with mask 1 that some token of their piece predicts, counted from
// the batch's own tensors.
uint64_t masked_targets(const PackedBatch& b) {
  const auto cu = b.cu_seqlens.accessor<int32_t, 1>();
  const auto mask = b.loss_mask.accessor<uint8_t, 1>();
  uint64_t n = 0;
  for (int64_t i = 0; i < b.num_sequences(); ++i)
    for (int32_t t = cu[i] + 1; t < cu[i + 1]; ++t) n += mask[t];
  return n;
}

// Runs `steps` optimizer steps of W simulated ranks and returns the micro-batches' ranges
// in global order; checks that the ranks agree on everything they compute alike.
std::vector<Range> run_steps(const std::shared_ptr<const TokenDataset>& data, const Layout& s, DataPosition& position,
                             int steps) {
  std::vector<StepPlanner> ranks;
  for (int r = 0; r < s.world; ++r) {
    ranks.emplace_back(data, PackerConfig{s.budget, LongSamplePolicy::split, true, false, {}},
                       DataParallelConfig{s.world, r, s.accum}, position);
  }
  std::vector<Range> stream;
  for (int step = 0; step < steps; ++step) {
    std::vector<StepPlan> plans;
    for (auto& rank : ranks) plans.push_back(rank.next_step());
    uint64_t tokens = 0, loss_targets = 0;
    for (const StepPlan& p : plans) {
      EXPECT_EQ(p.global_loss_targets, plans[0].global_loss_targets);
      EXPECT_EQ(p.position_after, plans[0].position_after);
      EXPECT_EQ(p.global_tokens, plans[0].global_tokens);
      EXPECT_EQ(p.global.size(), size_t(s.world * s.accum));
      EXPECT_EQ(p.micro_batches.size(), size_t(s.accum));
      for (const PackedBatch& b : p.micro_batches) {
        tokens += b.num_tokens();
        loss_targets += masked_targets(b);
      }
    }
    EXPECT_EQ(tokens, plans[0].global_tokens) << "the global count must be the sum over ranks";
    EXPECT_EQ(loss_targets, plans[0].global_loss_targets) << "the loss's normaliser must count the ranks' targets";
    for (int g = 0; g < s.world * s.accum; ++g) {
      const PackedBatch& b = plans[g % s.world].micro_batches[g / s.world];
      EXPECT_EQ(uint64_t(b.num_tokens()), plans[0].global[g].num_tokens);
      EXPECT_LE(uint64_t(b.num_tokens()), s.budget);
      for (const Range& r : ranges_of(b)) stream.push_back(r);
    }
    position = plans[0].position_after;
  }
  return stream;
}

// The stream as it must be: epoch permutation order, whole samples. Adjacent pieces of a
// split sample are merged before comparing, so different budgets compare equal.
std::vector<Range> merged(const std::vector<Range>& stream) {
  std::vector<Range> out;
  for (const Range& r : stream) {
    if (!out.empty() && out.back().sample == r.sample && out.back().end == r.begin) {
      out.back().end = r.end;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<Range> expected_stream(const TokenDataset& data, uint64_t seed, size_t count) {
  std::vector<Range> out;
  for (uint64_t epoch = 0; out.size() < count; ++epoch) {
    for (uint64_t s : epoch_permutation(seed, epoch, data.num_samples(), true)) {
      out.push_back(Range{int64_t(s), 0, int64_t(data.sample_length(s))});
    }
  }
  out.resize(count);
  return out;
}

TEST(StepPlanner, EverySampleOnceFor1_2_4Ranks) {
  at::set_num_threads(1);
  const auto data = mixed_dataset();
  for (const Layout s : {Layout{32, 1, 1}, Layout{32, 2, 1}, Layout{32, 4, 1}, Layout{24, 2, 3}, Layout{48, 4, 2}}) {
    SCOPED_TRACE(::testing::Message() << "budget " << s.budget << " world " << s.world << " accum " << s.accum);
    DataPosition position{11, 0, 0, 0};
    std::vector<Range> stream;
    while (position.epoch == 0) {
      const auto more = run_steps(data, s, position, 1);
      stream.insert(stream.end(), more.begin(), more.end());
    }
    std::vector<Range> epoch0 = merged(stream);
    ASSERT_GE(epoch0.size(), data->num_samples());
    epoch0.resize(data->num_samples());  // the last step may reach into epoch 1
    std::map<int64_t, int> seen;
    for (const Range& r : epoch0) ++seen[r.sample];
    EXPECT_EQ(seen.size(), data->num_samples());
    for (const auto& [sample, count] : seen) EXPECT_EQ(count, 1) << "sample " << sample;
    EXPECT_EQ(epoch0, expected_stream(*data, 11, data->num_samples()));
  }
}

// train.epochs = E: the stream ends after exactly E passes. No micro-batch straddles an
// epoch boundary (in the global stream of tokens, a multiple of the dataset's token count),
// every sample is trained E times, the last step is short (its missing micro-batches
// empty) and ends at epoch E, and nothing follows it.
TEST(StepPlanner, EndsAfterExactlyTheEpochsWithoutSpilling) {
  at::set_num_threads(1);
  const auto data = mixed_dataset();
  const uint64_t dataset_tokens = data->num_tokens();
  for (const uint64_t epochs : {uint64_t{1}, uint64_t{2}}) {
    for (const Layout s : {Layout{32, 1, 1}, Layout{24, 2, 3}, Layout{48, 4, 2}, Layout{5000, 2, 2}}) {
      SCOPED_TRACE(::testing::Message() << epochs << " epochs, budget " << s.budget << " world " << s.world
                                        << " accum " << s.accum);
      PackerConfig packing{s.budget, LongSamplePolicy::split, true, false, {}};
      packing.end_epoch = epochs;
      std::vector<StepPlanner> ranks;
      for (int r = 0; r < s.world; ++r)
        ranks.emplace_back(data, packing, DataParallelConfig{s.world, r, s.accum}, DataPosition{9, 0, 0, 0});
      std::map<int64_t, uint64_t> trained;  // sample -> tokens trained
      uint64_t at = 0;  // tokens of the global stream before the next micro-batch
      DataPosition position;
      int steps = 0;
      while (position.epoch < epochs) {
        ASSERT_LT(++steps, 10000) << "the stream never ended";
        std::vector<StepPlan> plans;
        for (auto& rank : ranks) plans.push_back(rank.next_step());
        position = plans[0].position_after;
        for (int g = 0; g < s.world * s.accum; ++g) {
          const PackedBatch& b = plans[g % s.world].micro_batches[g / s.world];
          if (b.num_tokens() == 0) continue;
          const uint64_t n = static_cast<uint64_t>(b.num_tokens());
          EXPECT_EQ(at / dataset_tokens, (at + n - 1) / dataset_tokens) << "a micro-batch crossed an epoch boundary";
          at += n;
          for (const Range& r : ranges_of(b)) trained[r.sample] += static_cast<uint64_t>(r.end - r.begin);
        }
      }
      EXPECT_EQ(position, (DataPosition{9, epochs, 0, 0}));
      EXPECT_EQ(at, epochs * dataset_tokens);
      ASSERT_EQ(trained.size(), data->num_samples());
      for (const auto& [sample, tokens] : trained)
        EXPECT_EQ(tokens, epochs * data->sample_length(static_cast<uint64_t>(sample))) << "sample " << sample;
      for (auto& rank : ranks) {
        const StepPlan after = rank.next_step();
        EXPECT_EQ(after.global_tokens, 0u) << "a step after the end of the data";
        EXPECT_EQ(after.micro_batches.size(), size_t(s.accum)) << "every round still has its (empty) micro-batch";
      }
    }
  }
}

TEST(StepPlanner, LossTargetsOfAMaskedDatasetAreCountedGlobally) {
  at::set_num_threads(1);
  const auto data = mixed_dataset(true);
  for (const Layout s : {Layout{32, 1, 1}, Layout{24, 2, 3}, Layout{16, 4, 2}}) {
    SCOPED_TRACE(::testing::Message() << "budget " << s.budget << " world " << s.world << " accum " << s.accum);
    DataPosition position{7, 0, 0, 0};
    run_steps(data, s, position, 6);
  }
}

TEST(StepPlanner, DeterministicForSeedAndLayout) {
  at::set_num_threads(1);
  const auto data = mixed_dataset();
  DataPosition a{3, 0, 0, 0}, b{3, 0, 0, 0}, c{4, 0, 0, 0};
  EXPECT_EQ(run_steps(data, Layout{32, 2, 2}, a, 5), run_steps(data, Layout{32, 2, 2}, b, 5));
  EXPECT_EQ(a, b);
  EXPECT_FALSE(run_steps(data, Layout{32, 2, 2}, c, 5) == run_steps(data, Layout{32, 2, 2}, b, 5));
}

TEST(StepPlanner, RestoreWithAnotherBudgetWorldOrAccumContinuesExactly) {
  at::set_num_threads(1);
  const auto data = mixed_dataset();
  const std::vector<std::pair<Layout, Layout>> changes{
      {{32, 2, 1}, {16, 2, 1}}, {{32, 2, 1}, {64, 4, 1}}, {{24, 4, 2}, {24, 1, 3}},
      {{16, 1, 1}, {40, 2, 5}}, {{48, 2, 2}, {20, 4, 1}}};
  bool resumed_inside_a_split_sample = false;
  for (const auto& [before, after] : changes) {
    for (int steps_before = 1; steps_before <= 7; ++steps_before) {
      SCOPED_TRACE(::testing::Message() << "budget " << before.budget << "->" << after.budget << ", world "
                                        << before.world << "->" << after.world << ", accum " << before.accum
                                        << "->" << after.accum << ", after " << steps_before << " steps");
      DataPosition position{21, 0, 0, 0};
      std::vector<Range> stream = run_steps(data, before, position, steps_before);
      resumed_inside_a_split_sample |= position.offset_in_sample != 0;
      const DataPosition saved = position;  // as a checkpoint stores it
      const std::vector<Range> rest = run_steps(data, after, position, 12);
      ASSERT_FALSE(rest.empty());
      EXPECT_EQ(rest.front().begin, int64_t(saved.offset_in_sample)) << "resumes at the saved offset";
      stream.insert(stream.end(), rest.begin(), rest.end());
      const std::vector<Range> whole = merged(stream);
      // The last sample may be cut by the end of the run; every earlier one is whole and
      // in permutation order across the restore (spans epochs 0 and 1).
      std::vector<Range> complete(whole.begin(), whole.end() - 1);
      EXPECT_EQ(complete, expected_stream(*data, 21, complete.size()));
    }
  }
  EXPECT_TRUE(resumed_inside_a_split_sample) << "the cases must include a restore in the middle of a split sample";
}

}  // namespace
}  // namespace topotrain::data
