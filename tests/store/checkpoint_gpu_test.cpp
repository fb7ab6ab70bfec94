// The snapshot of CUDA tensors (GPU machines only, ctest label gpu): the host does not
// wait for the device, the saved values are those the stream had computed when save() was
// called, even though the tensor is overwritten right after, and a read issued after save()
// does not wait for the whole snapshot.
#include <chrono>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

#include "topotrain/core/files.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/store/checkpoint_writer.h"

using namespace topotrain;

TEST(CheckpointGpu, SnapshotRunsOnTheDeviceOrderedAfterEarlierWorkAndBeforeLaterUpdates) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = make_temp_directory("topotrain-ckpt-gpu-");
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  const torch::Tensor a = torch::randn({8192, 8192}, options) / 90.0;
  torch::Tensor x = torch::randn({8192, 8192}, options);
  CheckpointState state;
  state.step = 1;
  state.tensors["model/x"] = x;
  state.tensors["optim/bf16"] = torch::ones({1000, 3}, options.dtype(torch::kBFloat16));
  {
    CheckpointWriter writer(dir, 0);
    writer.reserve(state.tensors);
    EXPECT_TRUE(writer.buffers_pinned());
    torch::cuda::synchronize();
    // Tenths of a second of matmuls (few, long kernels) that end in x, still running when
    // save() returns.
    for (int i = 0; i < 20; ++i) x.copy_(torch::matmul(x, a));
    at::cuda::CUDAEvent chain_done;
    chain_done.record(c10::cuda::getCurrentCUDAStream());
    EXPECT_FALSE(writer.snapshot_unordered());
    const double stall = writer.save(state);
    EXPECT_FALSE(chain_done.query()) << "save() waited for the device: " << stall << " s";
    EXPECT_TRUE(writer.snapshot_unordered());  // the trainer times the wait that follows
    writer.order_updates_after_snapshot();
    EXPECT_FALSE(writer.snapshot_unordered());
    const torch::Tensor expected = x.cpu();  // what the chain computed: the snapshot's values
    x.fill_(7);  // the next optimizer step
    writer.wait();
    const CheckpointState saved = CheckpointReader::load(join_path(dir, CheckpointWriter::file_name(1)), {});
    EXPECT_TRUE(torch::equal(saved.tensors.at("model/x"), expected));
    EXPECT_TRUE(torch::equal(saved.tensors.at("optim/bf16"), torch::ones({1000, 3}, torch::kBFloat16)));
  }
  remove_tree(dir);
}

// checkpoint.pinned = false: pageable buffers, the same values (the copy then blocks).
TEST(CheckpointGpu, PageableBuffersSaveTheSameValues) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = make_temp_directory("topotrain-ckpt-gpu-");
  CheckpointState state;
  state.step = 2;
  state.tensors["model/x"] = torch::randn({333, 77}, torch::TensorOptions().device(torch::kCUDA));
  {
    CheckpointWriter writer(dir, 0, /*pinned=*/false);
    writer.save(state);
    EXPECT_FALSE(writer.buffers_pinned());
    writer.order_updates_after_snapshot();
    const torch::Tensor expected = state.tensors["model/x"].cpu();
    state.tensors["model/x"].fill_(3);
    writer.wait();
    const CheckpointState saved = CheckpointReader::load(join_path(dir, CheckpointWriter::file_name(2)), {});
    EXPECT_TRUE(torch::equal(saved.tensors.at("model/x"), expected));
  }
  remove_tree(dir);
}

// The snapshot's copies go out in chunks, 64 MiB queued at most: a small device-to-host read
// issued after save() (the step's read, on the compute stream) queues behind those on the copy
// engine, not behind the whole snapshot. 2 GiB take tens of milliseconds over any host link;
// the read must come back in under half of that.
TEST(CheckpointGpu, AReadAfterSaveWaitsForQueuedChunksNotForTheWholeSnapshot) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = make_temp_directory("topotrain-ckpt-gpu-");
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  CheckpointState state;
  state.step = 3;
  state.tensors["model/big"] = torch::full({int64_t{1} << 29}, 2.5f, options);  // 2 GiB
  const torch::Tensor small = torch::arange(16, options);
  {
    CheckpointWriter writer(dir, 0);
    writer.reserve(state.tensors);
    torch::cuda::synchronize();
    using clock = std::chrono::steady_clock;
    const auto saved_at = clock::now();
    writer.save(state);
    const torch::Tensor read = small.cpu();
    const double read_s = std::chrono::duration<double>(clock::now() - saved_at).count();
    writer.order_updates_after_snapshot();
    torch::cuda::synchronize();
    const double copy_s = std::chrono::duration<double>(clock::now() - saved_at).count();
    EXPECT_TRUE(torch::equal(read, torch::arange(16, torch::kFloat32)));
    EXPECT_LT(read_s, 0.5 * copy_s) << "the read took " << read_s << " s of the snapshot's " << copy_s << " s";
    state.tensors["model/big"].fill_(0);  // the update the wait ordered after the copies
    writer.wait();
    const CheckpointState back = CheckpointReader::load(join_path(dir, CheckpointWriter::file_name(3)), {});
    EXPECT_TRUE(torch::equal(back.tensors.at("model/big"), torch::full({int64_t{1} << 29}, 2.5f)));
  }
  remove_tree(dir);
}
