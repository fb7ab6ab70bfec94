#include <gtest/gtest.h>

#include <torch/torch.h>

#include "topotrain/comm/backend.h"

using namespace topotrain;
using namespace topotrain::comm;

namespace {

class MpiBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    backend = make_backend(MPI_COMM_WORLD, Device::cpu());
  }
  std::unique_ptr<Backend> backend;
};

// Each rank's contribution, reproducible on every rank for the reference.
at::Tensor contribution(int rank, at::ScalarType type) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + rank);
  // In [0.5, 2): sums of a few bf16 values of this range are exact in fp32, so the
  // reference does not depend on the order MPI adds them in.
  return (at::rand({257}, generator, at::kFloat) * 1.5 + 0.5).to(type);
}

}  // namespace

TEST_F(MpiBackendTest, FactoryPicksMpiOnCpuAndRefusesCudaWithoutCuda) {
  EXPECT_STREQ(backend->name(), "mpi");
  EXPECT_TRUE(backend->device().is_cpu);
#ifndef TOPOTRAIN_CUDA
  EXPECT_THROW(make_backend(MPI_COMM_WORLD, Device::cuda(0)), std::runtime_error);
#endif
}

TEST_F(MpiBackendTest, AllReduceSumsEveryNativeType) {
  int n = backend->size();
  for (at::ScalarType type : {at::kFloat, at::kDouble, at::kInt, at::kLong}) {
    at::Tensor t = at::full({5}, backend->rank() + 1, at::TensorOptions().dtype(type));
    backend->all_reduce(t, ReduceOp::sum);
    EXPECT_TRUE(at::equal(t, at::full({5}, n * (n + 1) / 2, at::TensorOptions().dtype(type)))) << type;
  }
}

TEST_F(MpiBackendTest, AllReduceAveragesFloats) {
  at::Tensor t = at::full({3}, 2.0 * backend->rank(), at::kDouble);
  backend->all_reduce(t, ReduceOp::avg);
  EXPECT_TRUE(at::allclose(t, at::full({3}, backend->size() - 1.0, at::kDouble)));
  at::Tensor ints = at::ones({3}, at::kInt);
  EXPECT_THROW(backend->all_reduce_async(ints, ReduceOp::avg), std::invalid_argument);
}

TEST_F(MpiBackendTest, SixteenBitFloatsAreSummedInFp32AndRoundedOnce) {
  for (at::ScalarType type : {at::kBFloat16, at::kHalf}) {
    at::Tensor mine = contribution(backend->rank(), type);
    at::Tensor reference = at::zeros({257}, at::kFloat);
    for (int r = 0; r < backend->size(); ++r) reference += contribution(r, type).to(at::kFloat);
    auto work = backend->all_reduce_async(mine, ReduceOp::sum);
    work->wait();
    EXPECT_EQ(mine.scalar_type(), type);
    EXPECT_TRUE(at::equal(mine, reference.to(type))) << type;
  }
}

TEST_F(MpiBackendTest, OutstandingAllReducesCompleteInAnyWaitOrder) {
  at::Tensor a = at::full({1000}, 1.0f);
  at::Tensor b = at::full({10}, 2.0f);
  auto first = backend->all_reduce_async(a, ReduceOp::sum);
  auto second = backend->all_reduce_async(b, ReduceOp::sum);
  second->wait();
  first->wait();
  EXPECT_TRUE(at::equal(a, at::full({1000}, 1.0f * backend->size())));
  EXPECT_TRUE(at::equal(b, at::full({10}, 2.0f * backend->size())));
}

TEST_F(MpiBackendTest, BroadcastCopiesTheRootsTensor) {
  int root = backend->size() - 1;
  at::Tensor t = backend->rank() == root ? at::arange(7, at::kLong) : at::zeros({7}, at::kLong);
  backend->broadcast(t, root);
  EXPECT_TRUE(at::equal(t, at::arange(7, at::kLong)));
}

TEST_F(MpiBackendTest, SendRecvAroundARing) {
  int n = backend->size(), r = backend->rank();
  at::Tensor out = contribution(r, at::kBFloat16);
  at::Tensor in = at::empty_like(out);
  // Even ranks send first, odd ranks receive first: no deadlock for any size >= 2.
  if (r % 2 == 0) {
    backend->send(out, (r + 1) % n);
    backend->recv(in, (r + n - 1) % n);
  } else {
    backend->recv(in, (r + n - 1) % n);
    backend->send(out, (r + 1) % n);
  }
  EXPECT_TRUE(at::equal(in, contribution((r + n - 1) % n, at::kBFloat16)));
  backend->barrier();
}

TEST_F(MpiBackendTest, RejectsNonContiguousTensors) {
  at::Tensor t = at::zeros({4, 4}).t();
  EXPECT_THROW(backend->all_reduce_async(t, ReduceOp::sum), std::invalid_argument);
}
