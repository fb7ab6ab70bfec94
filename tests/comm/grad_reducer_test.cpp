#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <torch/torch.h>

#include "topotrain/comm/backend.h"
#include "topotrain/comm/grad_reducer.h"

using namespace topotrain;
using namespace topotrain::comm;

namespace {

// A model with two dtypes (per-dtype buckets), an "expert" that only some micro-batches
// use, and a parameter no micro-batch ever uses.
struct TinyModel {
  at::Tensor w1, b1, w2, expert, unused;

  explicit TinyModel(std::uint64_t seed) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    w1 = at::randn({6, 4}, generator, at::kFloat).requires_grad_();
    b1 = at::randn({6}, generator, at::kFloat).requires_grad_();
    w2 = at::randn({3, 6}, generator, at::kDouble).requires_grad_();
    expert = at::randn({3, 6}, generator, at::kFloat).requires_grad_();
    unused = at::randn({2}, generator, at::kFloat).requires_grad_();
  }
  GradReducer::NamedParameters named() const {
    return {{"w1", w1}, {"b1", b1}, {"w2", w2}, {"expert", expert}, {"unused", unused}};
  }
  std::vector<at::Tensor> list() const { return {w1, b1, w2, expert, unused}; }
};

struct MicroBatch {
  at::Tensor x, target;
  bool routes_to_expert;
  std::int64_t tokens() const { return x.size(0); }
};

// Uneven token counts per rank and micro-batch, as token_budget packing produces.
MicroBatch micro_batch(int step, int rank, int micro) {
  std::int64_t tokens = 2 + (rank * 5 + micro * 3 + step) % 7;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(step * 10007 + rank * 101 + micro);
  return {at::randn({tokens, 4}, generator, at::kFloat), at::randn({tokens, 3}, generator, at::kFloat),
          (rank + micro + step) % 3 == 0};
}

// Sum over the micro-batch's tokens of the squared error.
at::Tensor summed_loss(const TinyModel& m, const MicroBatch& batch) {
  at::Tensor h = at::tanh(at::matmul(batch.x, m.w1.t()) + m.b1);
  at::Tensor y = at::matmul(h.to(at::kDouble), m.w2.t()).to(at::kFloat);
  if (batch.routes_to_expert) y = y + at::matmul(h, m.expert.t());
  return (y - batch.target).pow(2).sum();
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& kind, const std::vector<at::Tensor>& params) {
  if (kind == "sgd") return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05));
  return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
}

struct Case {
  int accumulation;
  std::string optimizer;
  bool bucket_per_parameter;  // else one bucket per dtype
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return "accum" + std::to_string(info.param.accumulation) + "_" + info.param.optimizer + "_" +
         (info.param.bucket_per_parameter ? "small_buckets" : "big_buckets");
}

class GradReducerMatchesOneProcess : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(GradReducerMatchesOneProcess, AfterSeveralOptimizerSteps) {
  at::set_num_threads(1);
  const Case& c = GetParam();
  auto backend = make_backend(MPI_COMM_WORLD, Device::cpu());
  const int ranks = backend->size(), rank = backend->rank();
  TinyModel model(7), reference(7);
  GradReducerConfig config;
  // A limit of 0 bytes closes a bucket after every parameter.
  config.first_bucket_mb = c.bucket_per_parameter ? 0.0 : 1.0;
  config.bucket_mb = c.bucket_per_parameter ? 0.0 : 25.0;
  GradReducer reducer(model.named(), *backend, config);
  const std::int64_t expected_collectives = c.bucket_per_parameter ? 5 : 2;  // 5 parameters, 2 dtypes
  std::int64_t expected_bytes = 0;
  for (const at::Tensor& p : model.list()) expected_bytes += static_cast<std::int64_t>(p.nbytes());
  auto optimizer = make_optimizer(c.optimizer, model.list());
  auto reference_optimizer = make_optimizer(c.optimizer, reference.list());

  for (int step = 0; step < 3; ++step) {
    std::int64_t global_tokens = 0;
    for (int r = 0; r < ranks; ++r)
      for (int m = 0; m < c.accumulation; ++m) global_tokens += micro_batch(step, r, m).tokens();

    // Step 1 drops every .grad() as an optimizer's set_to_none would: the reducer must
    // restore its bucket views by itself.
    if (step == 1) {
      for (const at::Tensor& p : model.list()) p.mutable_grad() = at::Tensor();
    } else {
      reducer.zero_grad();
    }
    for (int m = 0; m < c.accumulation; ++m) {
      bool last = m == c.accumulation - 1;
      reducer.begin_micro_batch(last);
      (summed_loss(model, micro_batch(step, rank, m)) / static_cast<double>(global_tokens)).backward();
      if (!last) {
        EXPECT_EQ(reducer.collectives(), 0) << "a collective ran on an accumulation micro-batch";
      }
    }
    reducer.finish();
    EXPECT_EQ(reducer.collectives(), expected_collectives);
    EXPECT_EQ(reducer.bytes(), expected_bytes);
    optimizer->step();

    // One process, the union of every rank's micro-batches, one token-weighted mean.
    for (const at::Tensor& p : reference.list())
      if (p.grad().defined()) p.mutable_grad().zero_();
    at::Tensor total = at::zeros({}, at::kFloat);
    for (int r = 0; r < ranks; ++r)
      for (int m = 0; m < c.accumulation; ++m) total = total + summed_loss(reference, micro_batch(step, r, m));
    (total / static_cast<double>(global_tokens)).backward();
    // As in the reducer, a parameter without gradient takes part with zeros.
    for (const at::Tensor& p : reference.list())
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    reference_optimizer->step();
  }
  std::vector<std::string> names = {"w1", "b1", "w2", "expert", "unused"};
  for (std::size_t i = 0; i < names.size(); ++i) {
    at::Tensor got = model.list()[i].detach(), want = reference.list()[i].detach();
    EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-6))
        << names[i] << " differs from the one-process reference by " << (got - want).abs().max().item<double>();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GradReducerMatchesOneProcess,
                         ::testing::Values(Case{1, "sgd", true}, Case{4, "sgd", true}, Case{1, "adam", false},
                                           Case{4, "adam", true}, Case{4, "sgd", false}),
                         case_name);

TEST(GradReducer, BucketsFollowReverseRegistrationOrderPerDtype) {
  auto backend = make_backend(MPI_COMM_WORLD, Device::cpu());
  TinyModel model(1);
  GradReducer per_dtype(model.named(), *backend);
  using Layout = std::vector<std::vector<std::string>>;
  EXPECT_EQ(per_dtype.bucket_layout(), (Layout{{"unused", "expert", "b1", "w1"}, {"w2"}}));
  for (const auto& [name, p] : model.named()) {
    EXPECT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().sum().item<double>(), 0.0) << name;
  }
  // The first bucket closes at first_bucket_mb, later ones at bucket_mb: 24 floats = 96 B.
  GradReducerConfig config;
  config.first_bucket_mb = 8.0 / (1024 * 1024);     // closes after 'unused' (8 B)
  config.bucket_mb = 100.0 / (1024 * 1024);         // 'expert' 72 B + 'b1' 24 B = 96 B < 100, + 'w1'
  GradReducer sized(model.named(), *backend, config);
  EXPECT_EQ(sized.bucket_layout(), (Layout{{"unused"}, {"expert", "b1", "w1"}, {"w2"}}));
}

TEST(GradReducer, GradientsAreViewsIntoTheBuckets) {
  auto backend = make_backend(MPI_COMM_WORLD, Device::cpu());
  TinyModel model(2);
  GradReducer reducer(model.named(), *backend);
  reducer.begin_micro_batch(true);
  (summed_loss(model, micro_batch(0, backend->rank(), 0)) * 0).backward();
  reducer.finish();
  // Reverse order: 'unused' then 'expert' then 'b1' then 'w1', contiguous in one buffer.
  const char* base = static_cast<const char*>(model.unused.grad().data_ptr());
  EXPECT_EQ(static_cast<const char*>(model.expert.grad().data_ptr()), base + model.unused.nbytes());
  EXPECT_EQ(static_cast<const char*>(model.b1.grad().data_ptr()), base + model.unused.nbytes() + model.expert.nbytes());
}

TEST(GradReducer, DisagreeingShapesFailOnEveryRankNamingTheParameter) {
  auto backend = make_backend(MPI_COMM_WORLD, Device::cpu());
  int last = backend->size() - 1;
  TinyModel model(3);
  auto named = model.named();
  if (backend->rank() == last) named[1].second = at::zeros({7}, at::requires_grad());
  try {
    GradReducer reducer(named, *backend);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("parameter #1 is 'b1' [7] Float on rank " + std::to_string(last)));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("but 'b1' [6] Float on rank 0"));
  }
}

TEST(GradReducer, DisagreeingCountsFailOnEveryRank) {
  auto backend = make_backend(MPI_COMM_WORLD, Device::cpu());
  int last = backend->size() - 1;
  TinyModel model(4);
  auto named = model.named();
  if (backend->rank() == last) named.emplace_back("extra", at::zeros({3}, at::requires_grad()));
  try {
    GradReducer reducer(named, *backend);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("parameter #5 is 'extra' [3] Float on rank " + std::to_string(last)));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("but nothing on rank 0"));
  }
}

TEST(GradReducer, SecondBackwardInTheLastMicroBatchIsAnError) {
  auto backend = make_backend(MPI_COMM_WORLD, Device::cpu());
  TinyModel model(5);
  GradReducer reducer(model.named(), *backend);
  reducer.begin_micro_batch(true);
  MicroBatch batch = micro_batch(0, 0, 0);
  summed_loss(model, batch).backward();
  EXPECT_THROW(summed_loss(model, batch).backward(), std::exception);
}
