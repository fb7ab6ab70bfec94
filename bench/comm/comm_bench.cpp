// Communication benchmarks on GPUs, one rank per GPU (mpirun -np 2 or more):
//   allreduce  NCCL all-reduce bus bandwidth, bf16, 1 MiB .. 1 GiB
//   reducer    GradReducer over a 500M-parameter bf16 gradient set vs one all-reduce of
//              the same bytes
//   link       hidden-state link throughput (rank 0 -> rank 1) over NCCL and CUDA IPC,
//              against a raw device-to-device peer copy
// Prints one table row per measurement: "bench  case  size_MiB  ms  GB/s  note".
#include <mpi.h>

#include <torch/torch.h>

#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <functional>
#include <string>

#include "topotrain/comm/backend.h"
#include "topotrain/comm/grad_reducer.h"
#include "topotrain/comm/hidden_state_link.h"

using namespace topotrain;
using namespace topotrain::comm;

namespace {

int rank = 0, world = 1;

void row(const char* bench, const std::string& what, double mib, double ms, double gbps, const std::string& note = "") {
  if (rank == 0) std::printf("%-9s %-22s %10.1f %10.3f %9.1f  %s\n", bench, what.c_str(), mib, ms, gbps, note.c_str());
  std::fflush(stdout);
}

// Mean milliseconds of `body` over `iterations` after `warmup`, all ranks in step.
double time_ms(int warmup, int iterations, const std::function<void()>& body) {
  for (int i = 0; i < warmup; ++i) body();
  cudaDeviceSynchronize();
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int i = 0; i < iterations; ++i) body();
  cudaDeviceSynchronize();
  MPI_Barrier(MPI_COMM_WORLD);
  return (MPI_Wtime() - start) * 1e3 / iterations;
}

double busbw(double bytes, double ms) { return bytes / (ms * 1e-3) * 2.0 * (world - 1) / world / 1e9; }

void bench_allreduce(Backend& backend, const at::TensorOptions& options) {
  for (std::int64_t mib = 1; mib <= 1024; mib *= 4) {
    at::Tensor t = at::ones({mib * 1024 * 1024 / 2}, options);
    double ms = time_ms(3, mib >= 256 ? 10 : 30, [&] { backend.all_reduce(t, ReduceOp::sum); });
    row("allreduce", "nccl bf16", static_cast<double>(mib), ms, busbw(t.nbytes(), ms));
  }
}

void bench_reducer(Backend& backend, const at::TensorOptions& options) {
  // 500M parameters as 40 layers of 12.5M: the shapes of a mid-sized transformer.
  std::vector<at::Tensor> params;
  GradReducer::NamedParameters named;
  for (int i = 0; i < 40; ++i) {
    params.push_back(at::zeros({2500, 5000}, options).requires_grad_());
    named.emplace_back("layer" + std::to_string(i), params.back());
  }
  GradReducer reducer(named, backend);
  auto backward = [&](bool reduce) {
    reducer.begin_micro_batch(reduce);
    at::Tensor loss = at::zeros({}, options.dtype(at::kFloat));
    for (const at::Tensor& p : params) loss = loss + p.sum();
    loss.backward();
    if (reduce) reducer.finish();
  };
  double bytes = 500e6 * 2;
  double alone = time_ms(2, 5, [&] { backward(false); });
  double with_reduce = time_ms(2, 5, [&] { backward(true); });
  at::Tensor flat = at::zeros({500'000'000}, options);
  double raw = time_ms(2, 5, [&] { backend.all_reduce(flat, ReduceOp::sum); });
  double reduce_only = with_reduce - alone;
  row("reducer", "raw all-reduce", bytes / 1048576, raw, busbw(bytes, raw));
  row("reducer", "backward alone", bytes / 1048576, alone, 0);
  row("reducer", "backward + reduce", bytes / 1048576, with_reduce, 0, std::to_string(reducer.bucket_count()) + " buckets");
  row("reducer", "reduce (exposed)", bytes / 1048576, reduce_only, busbw(bytes, reduce_only),
      "raw/exposed = " + std::to_string(raw / reduce_only));
}

void bench_link(const Device& device, LinkTransport transport) {
  if (world < 2) return;
  const std::int64_t tokens = 8192, columns = 5 * 4096;
  const int batches = 20;
  LinkEnds ends{1, {0}};
  LinkConfig config;
  config.transport = transport;
  config.queue_depth = 4;
  config.device = device;
  double seconds = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    HiddenStateSender sender(MPI_COMM_WORLD, ends, config);
    PackedHiddenBatch batch;
    batch.packed.cu_seqlens = at::tensor({0, static_cast<int>(tokens)}, at::kInt);
    batch.packed.tokens = at::zeros({tokens}, at::kLong);
    batch.packed.loss_mask = at::ones({tokens}, at::kByte);
    batch.packed.positions = at::arange(tokens, at::kLong);
    batch.packed.sample_ids = at::zeros({1}, at::kLong);
    batch.hidden = at::ones({tokens, columns}, at::TensorOptions(at::kBFloat16).device(at::kCUDA, device.index));
    for (int i = 0; i < batches; ++i) sender.send(batch);
    sender.close();
  } else if (rank == 1) {
    HiddenStateReceiver receiver(MPI_COMM_WORLD, ends, config);
    auto first = receiver.next();  // excludes set-up (communicators, IPC mapping)
    cudaDeviceSynchronize();
    double start = MPI_Wtime();
    int received = 1;
    while (auto batch = receiver.next()) ++received;
    cudaDeviceSynchronize();
    seconds = (MPI_Wtime() - start) / (received - 1);
  }
  MPI_Bcast(&seconds, 1, MPI_DOUBLE, 1, MPI_COMM_WORLD);
  double bytes = static_cast<double>(tokens * columns * 2);
  row("link", std::string(to_string(transport)) + " 0->1", bytes / 1048576, seconds * 1e3, bytes / seconds / 1e9);
}

void bench_peer_copy() {
  if (rank != 0 || torch::cuda::device_count() < 2) return;
  const std::size_t bytes = 8192ull * 5 * 4096 * 2;
  void *from = nullptr, *to = nullptr;
  cudaSetDevice(1);
  cudaMalloc(&to, bytes);
  cudaSetDevice(0);
  cudaMalloc(&from, bytes);
  cudaDeviceEnablePeerAccess(1, 0);
  auto once = [&] { cudaMemcpyPeerAsync(to, 1, from, 0, bytes, nullptr); };
  for (int i = 0; i < 3; ++i) once();
  cudaDeviceSynchronize();
  double start = MPI_Wtime();
  for (int i = 0; i < 20; ++i) once();
  cudaDeviceSynchronize();
  double seconds = (MPI_Wtime() - start) / 20;
  row("link", "raw peer copy 0->1", bytes / 1048576.0, seconds * 1e3, bytes / seconds / 1e9);
  cudaFree(from);
  cudaSetDevice(1);
  cudaFree(to);
  cudaSetDevice(0);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::string what = argc > 1 ? argv[1] : "all";
  int gpus = static_cast<int>(torch::cuda::device_count());
  Device device = Device::cuda(rank % gpus);
  cudaSetDevice(device.index);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device.index));
  auto options = at::TensorOptions(at::kBFloat16).device(at::kCUDA, device.index);
  if (rank == 0) std::printf("%-9s %-22s %10s %10s %9s  %s\n", "bench", "case", "MiB", "ms", "GB/s", "note");
  {
    auto backend = make_backend(MPI_COMM_WORLD, device);
    if (what == "all" || what == "allreduce") bench_allreduce(*backend, options);
    if (what == "all" || what == "reducer") bench_reducer(*backend, options);
  }
  if (what == "all" || what == "link") {
    bench_link(device, LinkTransport::nccl);
    bench_link(device, LinkTransport::ipc);
    bench_peer_copy();
  }
  MPI_Finalize();
  return 0;
}
