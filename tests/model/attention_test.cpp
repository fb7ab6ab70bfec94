// Packed causal attention on CPU: which kernel a batch's documents get, and documents of one
// length run as a dense [documents, length] grid against one masked softmax per document, in
// outputs and in the gradients of q, k and v.
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

TEST_F(AttentionTest, GridAttentionEqualsPerDocumentAttentionInOutputsAndGradients) {
  const std::vector<int64_t> lengths{40, 40, 40};
  auto q = torch::randn({120, 4, 8}, torch::kFloat64);
  auto kv = torch::randn({120, 4, 8}, torch::kFloat64);  // 2 k heads, then 2 v heads
  auto dout = torch::randn({120, 4, 8}, torch::kFloat64);
  const auto cu = cu_seqlens_of(lengths, torch::kCPU);
  const auto grid = mdl::layout_documents(cu, 40, lengths, mdl::AttentionBackend::dense_grid);
  ASSERT_EQ(grid.backend, mdl::AttentionBackend::dense_grid);
  const auto reference =
      attend(q, kv, dout, mdl::layout_documents(cu, 40, lengths, mdl::AttentionBackend::math_per_document), 0.3);
  const auto got = attend(q, kv, dout, grid, 0.3);
  EXPECT_TRUE(torch::allclose(got.out, reference.out, 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(got.dq, reference.dq, 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(got.dk, reference.dk, 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(got.dv, reference.dv, 1e-12, 1e-12));
  // A grid that does not cover the batch is refused, not read out of bounds.
  auto short_grid = grid;
  short_grid.grid_rows = 2;
  EXPECT_THROW(attend(q, kv, dout, short_grid, 0.3), std::invalid_argument);
}
