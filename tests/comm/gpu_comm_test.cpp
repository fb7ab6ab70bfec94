// The CUDA paths of comm on 2 GPUs: NCCL backend, the reducer on CUDA tensors, and the
// hidden-state link over NCCL and CUDA IPC. Run with 2 ranks, one GPU each.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "topotrain/comm/backend.h"
#include "topotrain/comm/grad_reducer.h"
#include "topotrain/comm/hidden_state_link.h"

using namespace topotrain;
using namespace topotrain::comm;

namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

Device my_gpu() {
  int count = static_cast<int>(torch::cuda::device_count());
  return Device::cuda(world_rank() % std::max(count, 1));
}

at::TensorOptions on_gpu(at::ScalarType type) { return at::TensorOptions(type).device(at::kCUDA, my_gpu().index); }

at::Tensor contribution(int rank, std::int64_t n) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(500 + rank);
  return at::rand({n}, generator, at::kFloat) * 1.5 + 0.5;  // sums of bf16 values exact in fp32
}

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    // NCCL refuses two ranks on one device, so a machine with fewer GPUs than ranks skips.
    int ranks = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (static_cast<int>(torch::cuda::device_count()) < ranks) GTEST_SKIP() << "needs one GPU per rank";
    at::set_num_threads(1);
  }
};

}  // namespace

TEST_F(Gpu, NcclAllReduceOfBf16MatchesTheFp32Sum) {
  auto backend = make_backend(MPI_COMM_WORLD, my_gpu());
  ASSERT_STREQ(backend->name(), "nccl");
  at::Tensor mine = contribution(backend->rank(), 4099).to(on_gpu(at::kBFloat16));
  at::Tensor reference = at::zeros({4099});
  for (int r = 0; r < backend->size(); ++r) reference += contribution(r, 4099).to(at::kBFloat16).to(at::kFloat);
  backend->all_reduce_async(mine, ReduceOp::sum)->wait();  // orders the current stream only
  EXPECT_TRUE(at::equal(mine.cpu(), reference.to(at::kBFloat16)));
  at::Tensor avg = at::full({8}, 2.0 * backend->rank(), on_gpu(at::kFloat));
  backend->all_reduce(avg, ReduceOp::avg);
  EXPECT_TRUE(at::allclose(avg.cpu(), at::full({8}, backend->size() - 1.0)));
  backend->barrier();
}

TEST_F(Gpu, ReducerOnCudaSumsGradientsOfEveryRank) {
  auto backend = make_backend(MPI_COMM_WORLD, my_gpu());
  at::Tensor w = at::ones({1000, 64}, on_gpu(at::kFloat)).requires_grad_();
  at::Tensor b = at::ones({64}, on_gpu(at::kBFloat16)).requires_grad_();
  GradReducerConfig config;
  config.first_bucket_mb = 0.01;
  config.bucket_mb = 0.1;
  GradReducer reducer({{"w", w}, {"b", b}}, *backend, config);
  for (int m = 0; m < 3; ++m) {
    reducer.begin_micro_batch(m == 2);
    ((w.sum() + b.to(at::kFloat).sum()) * (backend->rank() + 1)).backward();
  }
  reducer.finish();
  int n = backend->size();
  double expected = 3.0 * n * (n + 1) / 2;  // 3 micro-batches, rank r weighs r + 1
  EXPECT_TRUE(at::equal(w.grad().cpu(), at::full({1000, 64}, expected)));
  EXPECT_TRUE(at::equal(b.grad().cpu(), at::full({64}, expected, at::kBFloat16)));
  // One bucket per dtype here (w alone outgrows bucket_mb and stays whole), one collective
  // per bucket, and none in the two accumulation-only micro-batches.
  EXPECT_EQ(reducer.bucket_count(), 2u);
  EXPECT_EQ(reducer.collectives(), 2);
}

// CUDA IPC also works between two processes on one GPU, so the IPC link runs on a machine
// with a single GPU too; NCCL needs one GPU per rank.
class GpuLink : public Gpu, public ::testing::WithParamInterface<LinkTransport> {
 protected:
  void SetUp() override {
    if (GetParam() == LinkTransport::nccl) return Gpu::SetUp();
    if (torch::cuda::device_count() < 1) GTEST_SKIP() << "needs a GPU";
    at::set_num_threads(1);
  }
};

TEST_P(GpuLink, BatchesArriveBitExact) {
  LinkEnds ends{1, {0}};
  LinkConfig config;
  config.transport = GetParam();
  config.queue_depth = 3;
  config.device = my_gpu();
  const int batches = 12;
  auto make = [&](int seq) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seq);
    std::int64_t tokens = 100 + 37 * seq;  // grows: IPC slots must be re-shared
    PackedHiddenBatch batch;
    batch.packed.cu_seqlens = at::tensor({0, static_cast<int>(tokens)}, at::kInt);
    batch.packed.tokens = at::randint(1000, {tokens}, generator, at::kLong);
    batch.packed.loss_mask = at::ones({tokens}, at::kByte);
    batch.packed.positions = at::arange(tokens, at::kLong);
    batch.packed.sample_ids = at::tensor({static_cast<std::int64_t>(seq)}, at::kLong);
    batch.hidden = at::randn({tokens, 5 * 128}, generator, at::kFloat).to(at::kBFloat16);
    return batch;
  };
  if (world_rank() == 0) {
    HiddenStateSender sender(MPI_COMM_WORLD, ends, config);
    EXPECT_EQ(sender.transport(), GetParam());
    for (int seq = 0; seq < batches; ++seq) {
      PackedHiddenBatch batch = make(seq);
      batch.hidden = batch.hidden.to(on_gpu(at::kBFloat16));
      sender.send(batch);
    }
    sender.close();
  } else if (world_rank() == 1) {
    HiddenStateReceiver receiver(MPI_COMM_WORLD, ends, config);
    int seq = 0;
    while (auto batch = receiver.next()) {
      PackedHiddenBatch want = make(seq++);
      EXPECT_TRUE(batch->hidden.is_cuda());
      EXPECT_TRUE(at::equal(batch->hidden.cpu(), want.hidden));
      EXPECT_TRUE(at::equal(batch->packed.tokens, want.packed.tokens));
    }
    EXPECT_EQ(seq, batches);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, GpuLink, ::testing::Values(LinkTransport::nccl, LinkTransport::ipc),
                         [](const auto& info) { return std::string(to_string(info.param)); });
