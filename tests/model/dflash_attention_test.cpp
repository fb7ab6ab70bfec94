// The DFlash chunks and masks against the plain-math attention over the whole [queries, keys]
// mask built from the definition: outputs and gradients, for several chunkings.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "topotrain/model/attention_math.h"
#include "topotrain/model/dflash_anchors.h"
#include "topotrain/model/dflash_attention.h"
#include "dflash_sdpa_check.h"

namespace mdl = topotrain::model;

namespace {

class DFlashAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(11);
  }
};

// Keys are [context rows (T) ; block slots (N*B)]. Query slot (i, s) may see context row
// j iff j is in the block's document and j < anchor_i, and block slot (i', s') iff i' == i.
torch::Tensor dense_reference(const torch::Tensor& q, const torch::Tensor& ck, const torch::Tensor& cv,
                              const torch::Tensor& bk, const torch::Tensor& bv, const std::vector<int64_t>& cu,
                              const mdl::DFlashBlocks& blocks, double scale) {
  const int64_t T = ck.size(0), B = blocks.block_size, N = blocks.num_blocks(), Q = N * B;
  auto allowed = torch::zeros({Q, T + Q}, torch::kBool);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t a = blocks.anchor_rows[i];
    int64_t doc_begin = 0;
    for (size_t d = 0; d + 1 < cu.size(); ++d) {
      if (a >= cu[d] && a < cu[d + 1]) doc_begin = cu[d];
    }
    for (int64_t s = 0; s < B; ++s) {
      for (int64_t j = doc_begin; j < a; ++j) allowed[i * B + s][j] = true;
      for (int64_t s2 = 0; s2 < B; ++s2) allowed[i * B + s][T + i * B + s2] = true;
    }
  }
  auto heads_first = [](const torch::Tensor& t) { return t.transpose(0, 1); };
  return mdl::attention_math(heads_first(q), heads_first(torch::cat({ck, bk}, 0)), heads_first(torch::cat({cv, bv}, 0)),
                             allowed.logical_not(), scale)
      .transpose(0, 1);
}

}  // namespace

TEST_F(DFlashAttentionTest, MatchesDenseReferenceInOutputsAndGradients) {
  const int64_t B = 4, hq = 4, hkv = 2, dim = 8;
  const std::vector<int64_t> cu{0, 9, 12, 25};
  const int64_t T = cu.back();
  auto loss_mask = torch::ones({T}, torch::kUInt8);
  // Anchors at a document start, adjacent anchors, one whose block runs past its document's
  // end, and a document of three tokens.
  const auto blocks = mdl::blocks_at(torch::tensor(std::vector<int32_t>{0, 9, 12, 25}), loss_mask, B,
                                     {0, 3, 4, 7, 10, 13, 18, 23});
  const int64_t Q = blocks.num_blocks() * B;
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto q = torch::randn({Q, hq, dim}, opts).requires_grad_();
  auto ck = torch::randn({T, hkv, dim}, opts).requires_grad_();
  auto cv = torch::randn({T, hkv, dim}, opts).requires_grad_();
  auto bk = torch::randn({Q, hkv, dim}, opts).requires_grad_();
  auto bv = torch::randn({Q, hkv, dim}, opts).requires_grad_();
  const double scale = 0.35;
  auto upstream = torch::randn({Q, hq, dim}, opts);

  auto reference = dense_reference(q, ck, cv, bk, bv, cu, blocks, scale);
  auto ref_grads = torch::autograd::grad({(reference * upstream).sum()}, {q, ck, cv, bk, bv});

  // One block per chunk, a few blocks per chunk, everything of a document in one chunk.
  for (int64_t budget : {int64_t{1}, int64_t{100}, int64_t{1} << 20}) {
    mdl::DFlashAttentionOptions options;
    options.max_chunk_scores = budget;
    auto out = mdl::dflash_attention(q, ck, cv, bk, bv, blocks, scale, options);
    EXPECT_LE((out - reference).abs().max().item<double>(), 1e-12) << "budget " << budget;
    auto grads = torch::autograd::grad({(out * upstream).sum()}, {q, ck, cv, bk, bv});
    for (size_t i = 0; i < grads.size(); ++i) {
      EXPECT_LE((grads[i] - ref_grads[i]).abs().max().item<double>(), 1e-12) << "budget " << budget << " grad " << i;
    }
  }
}

TEST_F(DFlashAttentionTest, ChunksCoverEveryBlockOnceWithinTheBudget) {
  const int64_t B = 4;
  auto cu = torch::tensor(std::vector<int32_t>{0, 40, 41, 100});
  std::vector<int64_t> anchors;
  for (int64_t a = 0; a < 39; a += 3) anchors.push_back(a);
  for (int64_t a = 41; a < 99; a += 2) anchors.push_back(a);
  const auto blocks = mdl::blocks_at(cu, torch::ones({100}, torch::kUInt8), B, anchors);
  const int64_t budget = 600, max_blocks = 5;
  const auto chunks = mdl::plan_dflash_chunks(blocks, budget, max_blocks);
  int64_t next = 0;
  for (const auto& c : chunks) {
    EXPECT_EQ(c.first_block, next);
    EXPECT_GT(c.last_block, c.first_block);
    const int64_t n = c.last_block - c.first_block;
    EXPECT_LE(n, max_blocks);
    // A chunk of one block may exceed the budget (it cannot be split); larger ones may not.
    if (n > 1) {
      EXPECT_LE(n * B * (c.context_rows + B), budget);
    }
    // Keys stop at the last anchor of the chunk: nothing beyond what some block sees.
    EXPECT_EQ(c.context_rows, blocks.visible_context[c.last_block - 1]);
    EXPECT_EQ(c.document, blocks.anchor_rows[c.first_block] < 40 ? 0 : 2);  // document 1 has no anchor
    next = c.last_block;
  }
  EXPECT_EQ(next, blocks.num_blocks());
}

// A drafter plans once and every layer attends with that plan: the plan must carry nothing
// from one attention to the next, and must refuse queries it was not made for.
TEST_F(DFlashAttentionTest, OnePlanServesEveryLayerAndRefusesOtherQueries) {
  const int64_t B = 4, hq = 4, hkv = 1, dim = 8;
  const std::vector<int64_t> cu{0, 14, 25};
  const int64_t T = cu.back();
  const auto blocks = mdl::blocks_at(torch::tensor(std::vector<int32_t>{0, 14, 25}), torch::ones({T}, torch::kUInt8),
                                     B, {1, 5, 6, 12, 14, 20});
  const int64_t Q = blocks.num_blocks() * B;
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  mdl::DFlashAttentionOptions options;
  options.max_chunk_scores = 100;
  const auto plan = mdl::plan_dflash_attention(blocks, options, opts);
  ASSERT_GT(plan.chunks.size(), 2u);
  for (int layer = 0; layer < 3; ++layer) {
    auto q = torch::randn({Q, hq, dim}, opts), ck = torch::randn({T, hkv, dim}, opts),
         cv = torch::randn({T, hkv, dim}, opts), bk = torch::randn({Q, hkv, dim}, opts),
         bv = torch::randn({Q, hkv, dim}, opts);
    auto out = mdl::dflash_attention(q, ck, cv, bk, bv, plan, 0.3);
    auto reference = dense_reference(q, ck, cv, bk, bv, cu, blocks, 0.3);
    EXPECT_LE((out - reference).abs().max().item<double>(), 1e-12) << "layer " << layer;
  }
  auto q32 = torch::randn({Q, hq, dim}), k32 = torch::randn({T, hkv, dim}), b32 = torch::randn({Q, hkv, dim});
  try {
    mdl::dflash_attention(q32, k32, k32, b32, b32, plan, 0.3);
    FAIL() << "float queries passed a plan made for double";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the plan was made for Double on cpu, the queries are Float on cpu"),
              std::string::npos)
        << e.what();
  }
}

// The SDPA path's keys per chunk: [context prefix, zeros to the padded context, the chunk's
// block slots, zeros to the padded queries], against a gather from the definition; gradients
// added up over the chunks that share context rows.
TEST_F(DFlashAttentionTest, ChunkRowsArePaddedPrefixesAndBlocksWithGradientsAddedUp) {
  const int64_t B = 4, heads = 2, dim = 3, multiple = 8, min_blocks = 3;
  const std::vector<int64_t> cu{0, 14, 25};
  const int64_t T = cu.back();
  const auto blocks = mdl::blocks_at(torch::tensor(std::vector<int32_t>{0, 14, 25}), torch::ones({T}, torch::kUInt8),
                                     B, {1, 5, 6, 9, 12, 14, 17, 20, 23});
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  mdl::DFlashAttentionOptions options;
  options.backend = mdl::DFlashAttentionBackend::sdpa_chunked;
  options.max_chunk_scores = 100;
  options.sdpa_context_multiple = multiple;
  options.max_chunk_blocks = min_blocks;
  const auto plan = mdl::plan_dflash_attention(blocks, options, opts);
  ASSERT_GT(plan.chunks.size(), 3u);
  auto context = torch::randn({T, heads, dim}, opts).requires_grad_();
  auto block_rows = torch::randn({blocks.num_blocks() * B, heads, dim}, opts).requires_grad_();
  const auto rows = mdl::dflash_chunk_rows(context, block_rows, plan);
  ASSERT_EQ(rows.size(), plan.chunks.size());

  const int64_t zero_row = T + block_rows.size(0);
  auto source = torch::cat({context, block_rows, torch::zeros({1, heads, dim}, opts)}, 0);
  torch::Tensor loss = torch::zeros({}, opts), reference_loss = torch::zeros({}, opts);
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& c = plan.chunks[i];
    const int64_t slots = (c.last_block - c.first_block) * B;
    const int64_t padded_context = (c.context_rows + multiple - 1) / multiple * multiple;
    const int64_t padded_queries = std::max(slots, min_blocks * B);
    std::vector<int64_t> index;
    for (int64_t j = 0; j < padded_context; ++j) index.push_back(j < c.context_rows ? cu[c.document] + j : zero_row);
    for (int64_t j = 0; j < padded_queries; ++j) index.push_back(j < slots ? T + c.first_block * B + j : zero_row);
    const auto expected = source.index_select(0, torch::tensor(index));
    ASSERT_EQ(rows[i].sizes(), expected.sizes()) << "chunk " << i;
    EXPECT_TRUE(torch::equal(rows[i], expected)) << "chunk " << i;
    const auto upstream = torch::randn(expected.sizes(), opts);
    loss = loss + (rows[i] * upstream).sum();
    reference_loss = reference_loss + (expected * upstream).sum();
  }
  const auto grads = torch::autograd::grad({loss}, {context, block_rows});
  const auto reference = torch::autograd::grad({reference_loss}, {context, block_rows});
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_LE((grads[i] - reference[i]).abs().max().item<double>(), 1e-12) << "gradient " << i;
  }
}

// The SDPA path needs no GPU: on CPU at::scaled_dot_product_attention runs torch's CPU kernel
// with the same masks, padding and chunking. fp32 on both sides; what remains is summation
// order.
TEST_F(DFlashAttentionTest, SdpaPathMatchesTheMathPathOnCpu) {
  topotrain::model::test_support::expect_sdpa_matches_math(torch::TensorOptions().dtype(torch::kFloat32), 1e-4);
}
