// DFlash attention on a GPU: the SDPA path against the math path (outputs and gradients).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "topotrain/model/dflash_attention.h"
#include "topotrain/torch_compat.h"

namespace mdl = topotrain::model;

TEST(DFlashGpu, SdpaPathMatchesTheMathPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  if (!topotrain::compat::kHasSdpa) GTEST_SKIP() << "this torch has no scaled_dot_product_attention";
  torch::manual_seed(3);
  const int64_t B = 16, hq = 8, hkv = 2, dim = 64, T = 600;
  auto cu = torch::tensor(std::vector<int32_t>{0, 250, 260, 600});
  std::vector<int64_t> anchors{0, 5, 6, 100, 248, 250, 300, 301, 450, 598};
  const auto blocks = mdl::blocks_at(cu, torch::ones({T}, torch::kUInt8), B, anchors);
  const int64_t Q = blocks.num_blocks() * B;
  auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  std::vector<torch::Tensor> inputs{torch::randn({Q, hq, dim}, opts), torch::randn({T, hkv, dim}, opts),
                                    torch::randn({T, hkv, dim}, opts), torch::randn({Q, hkv, dim}, opts),
                                    torch::randn({Q, hkv, dim}, opts)};
  for (auto& t : inputs) t.requires_grad_();
  auto upstream = torch::randn({Q, hq, dim}, opts);
  auto run = [&](mdl::DFlashAttentionBackend backend, int64_t budget, int64_t context_multiple = 0) {
    mdl::DFlashAttentionOptions options;
    options.backend = backend;
    options.max_chunk_scores = budget;
    options.max_sdpa_chunk_blocks = 3;
    options.sdpa_context_multiple = context_multiple;
    auto out = mdl::dflash_attention(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4], blocks, 0.125, options);
    auto grads = torch::autograd::grad({(out.to(torch::kFloat32) * upstream.to(torch::kFloat32)).sum()}, inputs);
    grads.insert(grads.begin(), out);
    return grads;
  };
  const auto math = run(mdl::DFlashAttentionBackend::math_chunked, int64_t{1} << 22);
  // Exact chunk shapes, and shapes padded to buckets (queries to 3 blocks, context to a
  // multiple of 64 rows): the padding must change nothing.
  for (int64_t multiple : {int64_t{0}, int64_t{64}}) {
    for (int64_t budget : {int64_t{4096}, int64_t{1} << 22}) {
      const auto sdpa = run(mdl::DFlashAttentionBackend::sdpa_chunked, budget, multiple);
      for (size_t i = 0; i < math.size(); ++i) {
        const double scale = math[i].abs().max().item<double>();
        const double err = (sdpa[i].to(torch::kFloat32) - math[i].to(torch::kFloat32)).abs().max().item<double>();
        EXPECT_LE(err, 2e-2 * scale) << "tensor " << i << " (0 = output, then gradients), budget " << budget
                                     << ", context multiple " << multiple;
      }
    }
  }
}
