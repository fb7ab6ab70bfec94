// The plain-math attention against its definition, one query head at a time with k and v
// repeated per head; the causal mask of a cached step; a cached step against the last rows of
// the whole sequence's causal attention.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "topotrain/model/attention.h"
#include "topotrain/model/attention_math.h"

namespace mdl = topotrain::model;

TEST(AttentionMathTest, GroupedHeadsUnderAMaskMatchTheDefinition) {
  torch::manual_seed(5);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  // Leading dimension 2, 6 query heads over 2 kv heads, 3 queries, 5 keys.
  auto q = torch::randn({2, 6, 3, 4}, opts), k = torch::randn({2, 2, 5, 4}, opts), v = torch::randn({2, 2, 5, 4}, opts);
  auto hidden = torch::rand({2, 3, 5}) < 0.4;
  hidden.select(2, 0).fill_(false);  // every query sees key 0
  const auto got = mdl::attention_math(q, k, v, hidden, 0.5);
  ASSERT_EQ(got.sizes(), q.sizes());
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 6; ++h) {
      auto scores = torch::matmul(q[b][h], k[b][h / 3].t()) * 0.5;
      scores = scores.masked_fill(hidden[b], -std::numeric_limits<double>::infinity());
      const auto expected = torch::matmul(torch::softmax(scores, -1), v[b][h / 3]);
      EXPECT_LE((got[b][h] - expected).abs().max().item<double>(), 1e-14) << "batch " << b << " head " << h;
    }
  }
  EXPECT_EQ(mdl::attention_math(q.to(torch::kBFloat16), k.to(torch::kBFloat16), v.to(torch::kBFloat16), hidden, 0.5)
                .scalar_type(),
            torch::kBFloat16);
}

TEST(AttentionMathTest, FutureKeysOfTheLastQueries) {
  const auto mask = mdl::future_keys(2, 5, torch::kCPU);
  const auto expected = torch::tensor({0, 0, 0, 0, 1, 0, 0, 0, 0, 0}, torch::kBool).view({2, 5});
  EXPECT_TRUE(torch::equal(mask, expected));
  EXPECT_TRUE(torch::equal(mdl::future_keys(3, 3, torch::kCPU), torch::ones({3, 3}, torch::kBool).triu(1)));
}

TEST(AttentionMathTest, ACachedStepEqualsTheLastRowsOfTheWholeSequence) {
  torch::manual_seed(6);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t length = 9, n = 3;
  auto q = torch::randn({length, 4, 8}, opts), k = torch::randn({length, 2, 8}, opts),
       v = torch::randn({length, 2, 8}, opts);
  const auto cu = torch::tensor({0, static_cast<int32_t>(length)}, torch::kInt32);
  const auto whole = mdl::varlen_causal_attention(
      q, k, v, mdl::layout_documents(cu, length, {length}, mdl::AttentionBackend::math_per_document), 0.3);
  const auto step = mdl::cached_causal_attention(q.narrow(0, length - n, n), k, v, 0.3);
  EXPECT_LE((step - whole.narrow(0, length - n, n)).abs().max().item<double>(), 1e-14);
}
