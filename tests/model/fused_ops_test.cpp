// The torch-op paths of the fused model ops on CPU (the paths the GPU test holds the CUDA
// kernels to), each against a computation written out independently.
#include <cmath>
#include <stdexcept>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "topotrain/model/layers.h"
#include "topotrain/model/moe.h"
#include "topotrain/model/rms_norm.h"
#include "topotrain/model/rotary.h"
#include "topotrain/model/swiglu.h"

namespace mdl = topotrain::model;

namespace {

class FusedOpsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(5);
  }
};

}  // namespace

TEST_F(FusedOpsCpu, SwigluTakesGateColumnsFirst) {
  auto gate = torch::randn({5, 4}), up = torch::randn({5, 4});
  auto expected = gate / (1 + torch::exp(-gate)) * up;
  EXPECT_TRUE(torch::allclose(mdl::swiglu(torch::cat({gate, up}, 1)), expected, 1e-6, 1e-6));
}

TEST_F(FusedOpsCpu, AddRmsNormReturnsTheSumAndItsNorm) {
  auto x = torch::randn({3, 8}), residual = torch::randn({3, 8}), weight = torch::rand({8}) + 0.5;
  auto out = mdl::add_rms_norm(x, residual, weight, 1e-6);
  auto sum = x + residual;
  auto expected = sum / torch::sqrt(sum.pow(2).mean(-1, true) + 1e-6) * weight;
  EXPECT_TRUE(torch::allclose(out.sum, sum));
  EXPECT_TRUE(torch::allclose(out.normed, expected, 1e-5, 1e-6));
}

TEST_F(FusedOpsCpu, NormRotaryOfAColumnSliceRotatesEachHeadByItsPosition) {
  const int64_t tokens = 4, heads = 2, dim = 8, half = dim / 2;
  auto fused = torch::randn({tokens, (heads + 1) * dim});  // a head before the slice, as k after q
  auto x = fused.narrow(1, dim, heads * dim).view({tokens, heads, dim});
  auto weight = torch::rand({dim}) + 0.5;
  auto positions = torch::tensor({0, 1, 2, 7}, torch::kInt64);
  const auto inverse_frequencies = mdl::rope_inverse_frequencies(dim, 10000.0, {}, positions.device());
  auto out = mdl::norm_rotary(x, weight, 1e-6, mdl::rotary_tables(positions, inverse_frequencies, torch::kFloat32));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      auto row = x[t][h];
      auto n = row / torch::sqrt(row.pow(2).mean() + 1e-6) * weight;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = positions[t].item<double>() / std::pow(10000.0, 2.0 * i / dim);
        const double a = n[i].item<double>(), b = n[i + half].item<double>();
        EXPECT_NEAR(out[t][h][i].item<double>(), a * std::cos(angle) - b * std::sin(angle), 1e-5);
        EXPECT_NEAR(out[t][h][i + half].item<double>(), b * std::cos(angle) + a * std::sin(angle), 1e-5);
      }
    }
  }
}

TEST_F(FusedOpsCpu, ExpertCombineWeighsEachChoiceReadThroughItsRow) {
  auto y = torch::randn({6, 4}), weights = torch::rand({3, 2});
  const auto rows = torch::tensor({{4, 0}, {2, 5}, {1, 3}}, torch::kInt64);
  auto out = mdl::combine_expert_outputs(y, rows, weights);
  for (int64_t t = 0; t < 3; ++t) {
    auto expected = y[rows[t][0].item<int64_t>()] * weights[t][0] + y[rows[t][1].item<int64_t>()] * weights[t][1];
    EXPECT_TRUE(torch::allclose(out[t], expected, 1e-6, 1e-6));
  }
  EXPECT_THROW(mdl::combine_expert_outputs(y.narrow(0, 0, 5), rows, weights), std::invalid_argument);
}
