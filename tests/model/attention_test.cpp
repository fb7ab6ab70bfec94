// Packed causal attention on CPU: which kernel a batch's documents get, and documents of one
// length run as a dense [documents, length] grid, and documents of several lengths in windows
// that run on into the next document and past the batch's end, against one masked softmax per
// document, in outputs and in the gradients of q, k and v.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "attention_check.h"
#include "topotrain/model/attention.h"

namespace mdl = topotrain::model;
using mdl::test_support::attend;
using mdl::test_support::cu_seqlens_of;

namespace {

class AttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(3);
  }
};

int64_t total(const std::vector<int64_t>& lengths) {
  int64_t tokens = 0;
  for (int64_t len : lengths) tokens += len;
  return tokens;
}

// Random fp64 q (4 heads of 8) and k/v (2 heads each) through `layout`, against one masked
// softmax per document, in the output and the gradients of q, k and v.
void expect_per_document_attention(const std::vector<int64_t>& lengths, const mdl::DocumentLayout& layout) {
  const int64_t tokens = total(lengths);
  auto q = torch::randn({tokens, 4, 8}, torch::kFloat64);
  auto kv = torch::randn({tokens, 4, 8}, torch::kFloat64);  // 2 k heads, then 2 v heads
  auto dout = torch::randn({tokens, 4, 8}, torch::kFloat64);
  const auto per_document = mdl::layout_documents(layout.cu_seqlens, layout.max_seqlen, lengths,
                                                  mdl::AttentionBackend::math_per_document);
  const auto reference = attend(q, kv, dout, per_document, 0.3);
  const auto got = attend(q, kv, dout, layout, 0.3);
  EXPECT_LE((got.out - reference.out).abs().max().item<double>(), 1e-12);
  EXPECT_LE((got.dq - reference.dq).abs().max().item<double>(), 1e-12);
  EXPECT_LE((got.dk - reference.dk).abs().max().item<double>(), 1e-12);
  EXPECT_LE((got.dv - reference.dv).abs().max().item<double>(), 1e-12);
}

// A layout that does not cover a batch of `tokens` is refused, not read out of bounds.
void expect_refused(const mdl::DocumentLayout& layout, int64_t tokens) {
  auto q = torch::zeros({tokens, 4, 8}, torch::kFloat64), kv = torch::zeros({tokens, 4, 8}, torch::kFloat64);
  EXPECT_THROW(attend(q, kv, q, layout, 0.3), std::invalid_argument);
}

}  // namespace

TEST_F(AttentionTest, OnlyDocumentsOfOneKnownLengthRunAsAGrid) {
  const auto grid = mdl::AttentionBackend::dense_grid;
  const auto rows = mdl::layout_documents(cu_seqlens_of({96, 96, 96}, torch::kCPU), 96, {96, 96, 96}, grid);
  EXPECT_EQ(rows.backend, grid);
  EXPECT_EQ(rows.grid_rows, 3);
  EXPECT_EQ(mdl::describe(rows), "cuDNN on a 3x96 grid");
  // Lengths unknown or unequal: a varlen kernel (math on the CPU, flash varlen on a GPU).
  const auto cu = cu_seqlens_of({96, 95, 96}, torch::kCPU);
  EXPECT_EQ(mdl::layout_documents(cu, 96, {}, grid).backend, mdl::AttentionBackend::math_per_document);
  EXPECT_EQ(mdl::layout_documents(cu, 96, {96, 95, 96}, grid).backend, mdl::AttentionBackend::math_per_document);
  // Other preferences pass through.
  EXPECT_EQ(mdl::layout_documents(cu, 96, {96, 95, 96}, mdl::AttentionBackend::flash_varlen).backend,
            mdl::AttentionBackend::flash_varlen);
}

TEST_F(AttentionTest, LongDocumentsOfSeveralLengthsRunInWindowsOfFewSizes) {
  // 16 sizes per power of two, at least multiples of 64.
  EXPECT_EQ(mdl::window_rows(40), 64);
  EXPECT_EQ(mdl::window_rows(100), 128);
  EXPECT_EQ(mdl::window_rows(2048), 2048);
  EXPECT_EQ(mdl::window_rows(2049), 2304);
  EXPECT_EQ(mdl::window_rows(3000), 3072);
  EXPECT_EQ(mdl::window_rows(5000), 5120);
  const auto grid = mdl::AttentionBackend::dense_grid;
  const std::vector<int64_t> lengths{3000, 2048, 5000};
  const auto layout = mdl::layout_documents(cu_seqlens_of(lengths, torch::kCPU), 5000, lengths, grid);
  ASSERT_EQ(layout.backend, mdl::AttentionBackend::document_windows);
  EXPECT_EQ(mdl::describe(layout), "cuDNN on 3 document windows");
  ASSERT_EQ(layout.windows.size(), 3u);
  EXPECT_EQ(layout.windows[1].begin, 3000);
  EXPECT_EQ(layout.windows[1].length, 2048);
  EXPECT_EQ(layout.windows[2].rows, 5120);
  // One document under kMinWindowLength, or all long enough but shorter than kMinWindowMeanLength
  // on average: flash varlen where the build has it (math on the CPU).
  const std::vector<int64_t> one_short{3000, mdl::kMinWindowLength - 1, 5000};
  EXPECT_EQ(mdl::layout_documents(cu_seqlens_of(one_short, torch::kCPU), 5000, one_short, grid).backend,
            mdl::AttentionBackend::math_per_document);
  const std::vector<int64_t> short_mean{2048, 4094, 3071};  // mean 3071
  EXPECT_FALSE(mdl::runs_in_windows(short_mean));
  EXPECT_TRUE(mdl::runs_in_windows({2048, 4096, 3072}));
  EXPECT_FALSE(mdl::runs_in_windows({}));
  EXPECT_EQ(mdl::layout_documents(cu_seqlens_of(short_mean, torch::kCPU), 4094, short_mean, grid).backend,
            mdl::AttentionBackend::math_per_document);
}

TEST_F(AttentionTest, WindowAttentionEqualsPerDocumentAttentionInOutputsAndGradients) {
  // Windows of 128, 64 and 128 rows: the first runs into both later documents, the second into
  // the third, the third 28 rows past the batch's end.
  const std::vector<int64_t> lengths{70, 40, 100};
  mdl::DocumentLayout windows{cu_seqlens_of(lengths, torch::kCPU), 100, mdl::AttentionBackend::document_windows, 0,
                              mdl::document_windows(lengths)};
  expect_per_document_attention(lengths, windows);
  windows.windows.pop_back();
  expect_refused(windows, total(lengths));
}

TEST_F(AttentionTest, GridAttentionEqualsPerDocumentAttentionInOutputsAndGradients) {
  const std::vector<int64_t> lengths{40, 40, 40};
  const auto cu = cu_seqlens_of(lengths, torch::kCPU);
  auto grid = mdl::layout_documents(cu, 40, lengths, mdl::AttentionBackend::dense_grid);
  ASSERT_EQ(grid.backend, mdl::AttentionBackend::dense_grid);
  expect_per_document_attention(lengths, grid);
  grid.grid_rows = 2;
  expect_refused(grid, total(lengths));
}
