// The KV cache's contract: committed rows kept across growth, a crop forgotten, uneven steps
// and crops past the length refused.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

#include "topotrain/model/kv_cache.h"

namespace mdl = topotrain::model;

TEST(KvCacheTest, KeepsCommittedRowsAcrossGrowthAndRefusesUnevenSteps) {
  mdl::KvCache cache(2, 1, 2, torch::TensorOptions(torch::kFloat32));
  const auto a = torch::arange(6, torch::kFloat32).view({3, 1, 2});
  const auto b = torch::arange(100, 110, torch::kFloat32).view({5, 1, 2});
  for (int64_t layer = 0; layer < 2; ++layer) cache.extend(layer, a, a * -1);
  cache.commit();
  for (int64_t layer = 0; layer < 2; ++layer) {
    const auto rows = cache.extend(layer, b, b * -1);  // grows past the first capacity
    ASSERT_EQ(rows.keys.size(0), 8);
    EXPECT_TRUE(torch::equal(rows.keys, torch::cat({a, b})));
    EXPECT_TRUE(torch::equal(rows.values, torch::cat({a, b}) * -1));
  }
  cache.commit();
  EXPECT_EQ(cache.length(), 8);
  cache.crop(3);
  EXPECT_TRUE(torch::equal(cache.rows(1).keys, a));

  cache.extend(0, b, b);  // layer 1 left out
  EXPECT_THROW(cache.commit(), std::invalid_argument);
  EXPECT_THROW(cache.crop(4), std::invalid_argument);
}
