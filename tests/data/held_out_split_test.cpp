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

// Both parts keep the file's token checksum: it names the file a resume must find again.
TEST(HeldOutSplit, BothPartsKeepTheFilesTokenChecksum) {
  TokenDatasetContents c = numbered(10).contents();
  c.file_tokens_crc32c = 0xC0FFEEu;
  const HeldOutSplit split = split_held_out(TokenDataset::from_contents(std::move(c), "file"), 0.2, 7);
  EXPECT_EQ(split.train.file_tokens_crc32c(), std::optional<std::uint32_t>(0xC0FFEEu));
  EXPECT_EQ(split.held_out.file_tokens_crc32c(), std::optional<std::uint32_t>(0xC0FFEEu));
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

TEST(HeldOutSplit, RefusesToHoldOutEveryTarget) {
  // Only document 3 (tokens 6, 7) has a token with mask 1 after its first. The draw depends
  // on the seed and the number of documents only, so the same documents without a mask show
  // which one each seed holds out.
  TokenDatasetContents masked;
  masked.vocab_size = 10;
  masked.tokens = {1, 2, 3, 4, 5, 6, 7};
  masked.offsets = {0, 2, 4, 5, 7};
  TokenDatasetContents unmasked = masked;
  masked.loss_mask = {1, 0, 1, 0, 1, 0, 1};
  std::set<bool> seen;
  for (std::uint64_t seed = 0; seed < 16; ++seed) {
    SCOPED_TRACE(seed);
    const HeldOutSplit reference = split_held_out(TokenDataset::from_contents(unmasked, "plain"), 0.25, seed);
    const bool holds_out_the_target = reference.held_out.contents().tokens.back() == 7;
    seen.insert(holds_out_the_target);
    try {
      const HeldOutSplit split = split_held_out(TokenDataset::from_contents(masked, "four"), 0.25, seed);
      EXPECT_FALSE(holds_out_the_target);
      EXPECT_EQ(split.train.num_loss_targets(), 1u);
    } catch (const ConfigError& e) {
      EXPECT_TRUE(holds_out_the_target);
      EXPECT_NE(std::string(e.what()).find("holds out every document of four that has a token with loss_mask 1"),
                std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(seen.size(), 2u) << "the seeds must cover both cases";
}
