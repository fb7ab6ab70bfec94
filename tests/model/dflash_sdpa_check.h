// Shared by the CPU and GPU DFlash attention tests: the SDPA path against the math path,
// outputs and the gradients of every input, on one device and dtype.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "topotrain/model/dflash_attention.h"

namespace topotrain::model::test_support {

// Three documents (one shorter than a block), anchors at document starts and ends, grouped
// k/v heads (8 query heads over 2). The SDPA path runs with exact chunk shapes and with
// shapes padded to buckets (queries to 3 blocks, context to a multiple of 64 rows), with a
// score budget that splits documents into chunks and one that does not: the padding and the
// split must change nothing. max|sdpa - math| <= tolerance * max|math| per tensor.
inline void expect_sdpa_matches_math(const torch::TensorOptions& opts, double tolerance) {
  torch::manual_seed(3);
  const int64_t B = 16, hq = 8, hkv = 2, dim = 64, T = 600;
  auto cu = torch::tensor(std::vector<int32_t>{0, 250, 260, 600});
  std::vector<int64_t> anchors{0, 5, 6, 100, 248, 250, 300, 301, 450, 598};
  const auto blocks = blocks_at(cu, torch::ones({T}, torch::kUInt8), B, anchors);
  const int64_t Q = blocks.num_blocks() * B;
  std::vector<torch::Tensor> inputs{torch::randn({Q, hq, dim}, opts), torch::randn({T, hkv, dim}, opts),
                                    torch::randn({T, hkv, dim}, opts), torch::randn({Q, hkv, dim}, opts),
                                    torch::randn({Q, hkv, dim}, opts)};
  for (auto& t : inputs) t.requires_grad_();
  auto upstream = torch::randn({Q, hq, dim}, opts);
  auto run = [&](DFlashAttentionBackend backend, int64_t budget, int64_t context_multiple = 0) {
    DFlashAttentionOptions options;
    options.backend = backend;
    options.max_chunk_scores = budget;
    options.max_chunk_blocks = 3;
    options.sdpa_context_multiple = context_multiple;
    auto out = dflash_attention(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4], blocks, 0.125, options);
    auto grads = torch::autograd::grad({(out.to(torch::kFloat32) * upstream.to(torch::kFloat32)).sum()}, inputs);
    grads.insert(grads.begin(), out);
    return grads;
  };
  const auto math = run(DFlashAttentionBackend::math_chunked, int64_t{1} << 22);
  for (int64_t multiple : {int64_t{0}, int64_t{64}}) {
    for (int64_t budget : {int64_t{4096}, int64_t{1} << 22}) {
      const auto sdpa = run(DFlashAttentionBackend::sdpa_chunked, budget, multiple);
      for (size_t i = 0; i < math.size(); ++i) {
        const double scale = math[i].abs().max().item<double>();
        const double err = (sdpa[i].to(torch::kFloat32) - math[i].to(torch::kFloat32)).abs().max().item<double>();
        EXPECT_LE(err, tolerance * scale) << "tensor " << i << " (0 = output, then gradients), budget " << budget
                                          << ", context multiple " << multiple;
      }
    }
  }
}

}  // namespace topotrain::model::test_support
