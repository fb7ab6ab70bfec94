// Packed causal attention on a GPU in bf16: cuDNN's dense kernel on documents of one length
// (the packed tensors viewed as a grid) and on long documents of several lengths (one window
// each, the last one past the batch's end), and FlashAttention-2 varlen on documents of one
// and of several lengths, each against one masked softmax per document in fp32, in outputs and
// in the gradients of q, k and v.
#include <algorithm>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "attention_check.h"
#include "topotrain/torch_compat.h"

namespace mdl = topotrain::model;
using mdl::test_support::attend;
using mdl::test_support::cu_seqlens_of;

namespace {

double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  auto bf = b.to(torch::kFloat32);
  return ((a.to(torch::kFloat32) - bf).abs().max() / bf.abs().max().clamp_min(1e-12)).item<double>();
}

}  // namespace

TEST(AttentionGpu, CudnnGridAndFlashVarlenMatchPerDocumentAttentionInFp32) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  torch::manual_seed(17);
  const auto device = torch::Device(torch::kCUDA);
  const double scale = 1.0 / std::sqrt(128.0);
  for (const auto& lengths :
       std::vector<std::vector<int64_t>>{{512, 512, 512, 512}, {300, 1000, 64, 700, 5, 900}, {3300, 2048, 4100}}) {
    SCOPED_TRACE(testing::PrintToString(lengths));
    int64_t tokens = 0;
    for (int64_t len : lengths) tokens += len;
    const int64_t max_len = *std::max_element(lengths.begin(), lengths.end());
    const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(device);
    auto q = torch::randn({tokens, 8, 128}, bf16), kv = torch::randn({tokens, 4, 128}, bf16);  // Hkv 2: groups of 4
    auto dout = torch::randn({tokens, 8, 128}, bf16);
    const auto cu = cu_seqlens_of(lengths, device);
    const auto reference = attend(q.to(torch::kFloat32), kv.to(torch::kFloat32), dout.to(torch::kFloat32),
                                  mdl::layout_documents(cu, max_len, lengths, mdl::AttentionBackend::math_per_document),
                                  scale);
    const bool one_length = std::all_of(lengths.begin(), lengths.end(), [&](int64_t n) { return n == max_len; });
    const bool long_documents = mdl::runs_in_windows(lengths);
    for (auto backend : {mdl::AttentionBackend::dense_grid, mdl::AttentionBackend::flash_varlen}) {
      SCOPED_TRACE(mdl::to_string(backend));
      const auto layout = mdl::layout_documents(cu, max_len, lengths, backend);
      const auto several_lengths = backend == mdl::AttentionBackend::dense_grid && long_documents
                                       ? mdl::AttentionBackend::document_windows
                                       : mdl::AttentionBackend::flash_varlen;
      ASSERT_EQ(layout.backend, one_length ? backend : several_lengths);
      const auto got = attend(q, kv, dout, layout, scale);
      EXPECT_EQ(got.out.scalar_type(), torch::kBFloat16);
      EXPECT_LT(relative_error(got.out, reference.out), 2e-2);
      EXPECT_LT(relative_error(got.dq, reference.dq), 2e-2);
      EXPECT_LT(relative_error(got.dk, reference.dk), 2e-2);
      EXPECT_LT(relative_error(got.dv, reference.dv), 2e-2);
    }
  }
}
