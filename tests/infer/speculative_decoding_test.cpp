// Greedy and speculative decoding: lossless (speculation == cached greedy == greedy without a
// cache, token for token) with a random drafter and with a known proposer whose mistakes are
// placed by hand; the statistics of that proposer against hand counts; stop tokens.
#include <gtest/gtest.h>
#include <map>
#include <torch/torch.h>

#include "oracle_proposer.h"
#include "tiny_models.h"
#include "topotrain/infer/constant_proposer.h"
#include "topotrain/infer/dflash_proposer.h"
#include "topotrain/infer/speculation_report.h"
#include "topotrain/infer/speculative_decoding.h"

namespace inf = topotrain::infer;
namespace ts = topotrain::test_support;

namespace {

class SpeculativeDecodingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(7);
  }
};

const std::vector<std::vector<int64_t>> kPrompts{{5}, {1, 2, 3, 4, 5, 6, 7}, {40, 9, 33, 12, 60, 2, 18, 18, 3, 27, 11}};

std::vector<int64_t> concatenated(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_F(SpeculativeDecodingTest, ARandomDrafterIsLosslessForDenseAndMoeTargets) {
  for (bool moe : {false, true}) {
    auto pair = ts::tiny_pair(moe);
    torch::NoGradGuard no_grad;
    inf::CachedTarget plain(*pair.target, {}), tapped(*pair.target, pair.drafter->taps());
    inf::DFlashProposer proposer(*pair.drafter);
    inf::DecodeOptions options;
    options.max_new_tokens = 19;
    for (const auto& prompt : kPrompts) {
      const auto reference = ts::reference_greedy(*pair.target, prompt, options.max_new_tokens);
      const auto greedy = inf::greedy_decode(plain, prompt, options);
      const auto speculative = inf::speculative_decode(tapped, proposer, prompt, options);
      EXPECT_EQ(greedy.tokens, reference) << (moe ? "moe" : "dense") << ", prompt of " << prompt.size();
      EXPECT_EQ(speculative.tokens, reference) << (moe ? "moe" : "dense") << ", prompt of " << prompt.size();
      EXPECT_EQ(greedy.target_forwards, options.max_new_tokens);
      EXPECT_TRUE(greedy.acceptance_lengths.empty());
      // Every verification but the prompt's forward yields at least one token.
      EXPECT_EQ(speculative.target_forwards, 1 + static_cast<int64_t>(speculative.acceptance_lengths.size()));
      EXPECT_LE(speculative.target_forwards, options.max_new_tokens);
    }
  }
}

TEST_F(SpeculativeDecodingTest, InjectedMistakesGiveTheHandCountedAcceptanceLengths) {
  auto pair = ts::tiny_pair();
  torch::NoGradGuard no_grad;
  const std::vector<int64_t>& prompt = kPrompts[2];
  const int64_t B = 4, prompt_length = static_cast<int64_t>(prompt.size());
  const auto truth = concatenated(prompt, ts::reference_greedy(*pair.target, prompt, 30));
  // Verification 0: slot 2 wrong -> length 2; 1: none -> 4; 2: slot 1 -> 1; 3: slot 3 -> 3;
  // then 4 each. Response lengths 1 (the prompt's token), 3, 7, 8, 11, 15, 19, 23 -> cut at 20.
  ts::OracleProposer oracle(B, 64, truth, {{0, 2}, {2, 1}, {3, 3}});
  inf::CachedTarget tapped(*pair.target, pair.drafter->taps()), plain(*pair.target, {});
  inf::DecodeOptions options;
  options.max_new_tokens = 20;
  const auto speculative = inf::speculative_decode(tapped, oracle, prompt, options);
  const auto greedy = inf::greedy_decode(plain, prompt, options);

  const std::vector<int64_t> response(truth.begin() + prompt_length, truth.begin() + prompt_length + 20);
  EXPECT_EQ(speculative.tokens, response);
  EXPECT_EQ(greedy.tokens, response);
  EXPECT_EQ(speculative.acceptance_lengths, (std::vector<int64_t>{2, 4, 1, 3, 4, 4, 4}));
  EXPECT_EQ(speculative.verification_positions, (std::vector<int64_t>{0, 2, 6, 7, 10, 14, 18}));
  EXPECT_EQ(speculative.target_forwards, 8);
  EXPECT_EQ(greedy.target_forwards, 20);

  // Two prompts' worth: the same outcome twice, summarised in buckets of 8 positions.
  const inf::PromptOutcome outcome{prompt_length, greedy, speculative, {}};
  const auto r = inf::summarize({outcome, outcome}, inf::SpeculationSetup{}, B, 8);
  EXPECT_EQ(r.prompts, 2);
  EXPECT_EQ(r.prompt_tokens, 2 * prompt_length);
  EXPECT_EQ(r.mismatched_prompts, 0);
  EXPECT_EQ(r.verifications, 14);
  EXPECT_DOUBLE_EQ(r.tau, 22.0 / 7.0);
  EXPECT_EQ(r.acceptance_histogram, (std::vector<int64_t>{2, 2, 2, 8}));
  ASSERT_EQ(r.tau_by_position.size(), 3u);
  EXPECT_EQ(r.tau_by_position[0].first, 0);
  EXPECT_EQ(r.tau_by_position[0].verifications, 8);  // positions 0, 2, 6, 7
  EXPECT_DOUBLE_EQ(r.tau_by_position[0].tau, 2.5);
  EXPECT_EQ(r.tau_by_position[1].first, 8);  // 10, 14
  EXPECT_DOUBLE_EQ(r.tau_by_position[1].tau, 4.0);
  EXPECT_EQ(r.tau_by_position[2].first, 16);  // 18
  EXPECT_EQ(r.tau_by_position[2].verifications, 2);
  EXPECT_DOUBLE_EQ(r.speculative_forwards_per_token(), 16.0 / 40.0);
  EXPECT_DOUBLE_EQ(r.greedy_forwards_per_token(), 1.0);
}

TEST_F(SpeculativeDecodingTest, AMismatchIsCountedAtItsFirstPosition) {
  inf::PromptOutcome same{3, {}, {}, {}}, differs{3, {}, {}, {}};
  same.greedy.tokens = same.speculative.tokens = {1, 2, 3};
  differs.greedy.tokens = {1, 2, 3, 4};
  differs.speculative.tokens = {1, 2, 9, 4};
  const auto r = inf::summarize({same, differs, differs}, inf::SpeculationSetup{}, 4);
  EXPECT_EQ(r.mismatched_prompts, 2);
  EXPECT_EQ(r.first_mismatch_prompt, 1);
  EXPECT_EQ(r.first_mismatch_position, 2);
  const auto text = inf::report_text(r);
  EXPECT_NE(text.find("NOT lossless: 2 of 3"), std::string::npos) << text;
}

TEST_F(SpeculativeDecodingTest, OutputStopsAfterTheFirstStopTokenEvenInsideAnAcceptedBlock) {
  auto pair = ts::tiny_pair();
  torch::NoGradGuard no_grad;
  const std::vector<int64_t>& prompt = kPrompts[1];
  const auto response = ts::reference_greedy(*pair.target, prompt, 12);
  // Stop at the response's 6th token: with every proposal right (blocks of 4: the prompt's
  // token, then 4 per verification) it is the second token of the second verification's block.
  inf::DecodeOptions options;
  options.max_new_tokens = 12;
  options.stop_tokens = {response[5]};
  const auto stop = std::find(response.begin(), response.end(), response[5]);
  const std::vector<int64_t> expected(response.begin(), stop + 1);
  ts::OracleProposer oracle(4, 64, concatenated(prompt, response), {});
  inf::CachedTarget tapped(*pair.target, pair.drafter->taps()), plain(*pair.target, {});
  EXPECT_EQ(inf::speculative_decode(tapped, oracle, prompt, options).tokens, expected);
  EXPECT_EQ(inf::greedy_decode(plain, prompt, options).tokens, expected);
}

// The trivial drafter drafts one token everywhere: a verification at response position p
// accepts the run of that token in the greedy response after p (at most B - 1), walked here by
// hand over the greedy response, and stays lossless.
TEST_F(SpeculativeDecodingTest, TheConstantDrafterAcceptsTheRunsOfItsTokenInTheGreedyResponse) {
  auto pair = ts::tiny_pair();
  torch::NoGradGuard no_grad;
  inf::CachedTarget plain(*pair.target, {}), tapped(*pair.target, pair.drafter->taps());
  inf::DecodeOptions options;
  options.max_new_tokens = 40;
  const int64_t B = pair.drafter->config().block_size;
  int64_t accepted_somewhere = 0;
  for (const auto& prompt : kPrompts) {
    const auto greedy = inf::greedy_decode(plain, prompt, options).tokens;
    std::map<int64_t, int64_t> counts;
    for (int64_t t : greedy) ++counts[t];
    int64_t token = greedy.front();
    for (const auto& [t, n] : counts)
      if (n > counts[token]) token = t;
    inf::ConstantProposer trivial(B, token);
    const auto decoded = inf::speculative_decode(tapped, trivial, prompt, options);
    EXPECT_EQ(decoded.tokens, greedy);
    std::vector<int64_t> expected;  // the prompt's forward yields response token 0
    for (std::size_t p = 0; p + 1 < greedy.size();) {
      int64_t run = 0;
      while (run < B - 1 && p + 1 + static_cast<std::size_t>(run) < greedy.size() &&
             greedy[p + 1 + static_cast<std::size_t>(run)] == token)
        ++run;
      expected.push_back(run + 1);
      accepted_somewhere += run;
      p += static_cast<std::size_t>(run) + 1;
    }
    EXPECT_EQ(decoded.acceptance_lengths, expected) << "prompt of " << prompt.size();
  }
  EXPECT_GT(accepted_somewhere, 0) << "the test drafter never accepted: it tests only the bounds";
}
