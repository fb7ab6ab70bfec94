// data::split_held_out: the held-out and kept documents are the dataset's, each once, in
// file order, with their loss masks; the draw depends on the seed only; fractions that
// leave nothing to train on are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "topotrain/core/error.h"
#include "topotrain/data/held_out_split.h"

using namespace topotrain;
using namespace topotrain::data;

namespace {

// Document d holds tokens 100 d, 100 d + 1, ... (d + 2 of them); token k's mask is k % 2.
TokenDataset numbered(std::uint64_t documents) {
  TokenDatasetContents c;
  c.vocab_size = 100 * documents + 100;
  for (std::uint64_t d = 0; d < documents; ++d) {
    for (std::uint64_t k = 0; k < d + 2; ++k) {
      c.tokens.push_back(static_cast<std::uint32_t>(100 * d + k));
      c.loss_mask.push_back(static_cast<std::uint8_t>(k % 2));
    }
    c.offsets.push_back(c.tokens.size());
  }
  return TokenDataset::from_contents(std::move(c), "numbered");
}

// The document numbers of a dataset made by numbered(), checking each is whole and intact.
std::vector<std::uint64_t> document_numbers(const TokenDataset& dataset) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t i = 0; i < dataset.num_samples(); ++i) {
    const SampleView s = dataset.sample(i);
    const std::uint64_t d = s.tokens[0] / 100;
    EXPECT_EQ(s.length, d + 2) << "document " << d;
    for (std::uint64_t k = 0; k < s.length; ++k) {
      EXPECT_EQ(s.tokens[k], 100 * d + k);
      EXPECT_EQ(s.loss_mask[k], k % 2);
    }
    out.push_back(d);
  }
  return out;
}

}  // namespace

TEST(HeldOutSplit, EveryDocumentOnceInFileOrderWithItsMask) {
  HeldOutSplit split = split_held_out(numbered(40), 0.1, 7);
  const auto held = document_numbers(split.held_out), kept = document_numbers(split.train);
  EXPECT_EQ(held.size(), 4u);
  EXPECT_EQ(kept.size(), 36u);
  EXPECT_TRUE(std::is_sorted(held.begin(), held.end()));
  EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
  std::set<std::uint64_t> all(held.begin(), held.end());
  all.insert(kept.begin(), kept.end());
  EXPECT_EQ(all.size(), 40u);
  EXPECT_EQ(split.train.num_tokens() + split.held_out.num_tokens(), numbered(40).num_tokens());
}

TEST(HeldOutSplit, TheSeedAloneDecides) {
  const auto first = document_numbers(split_held_out(numbered(50), 0.2, 3).held_out);
  EXPECT_EQ(document_numbers(split_held_out(numbered(50), 0.2, 3).held_out), first);
  EXPECT_NE(document_numbers(split_held_out(numbered(50), 0.2, 4).held_out), first);
  // At least one document, however small the fraction.
  EXPECT_EQ(split_held_out(numbered(50), 0.001, 3).held_out.num_samples(), 1u);
}

TEST(HeldOutSplit, RefusesToHoldOutEverything) {
  EXPECT_THROW(split_held_out(numbered(1), 0.5, 1), ConfigError);
  EXPECT_THROW(split_held_out(numbered(4), 0.9, 1), ConfigError);
}
