// On a GPU: phases timed with CUDA events on the streams their work runs on. For a
// profiled step of a Qwen3 model (forward, backward, AdamW) the phase times agree with the
// profiler's kernel totals; the all-reduce's device time comes from the NCCL stream; spans
// of another stream line up with the compute stream's scopes on one device timeline.
#include <gtest/gtest.h>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "topotrain/comm/backend.h"
#include "topotrain/comm/grad_reducer.h"
#include "topotrain/core/files.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/lm_loss.h"
#include "topotrain/store/phase_timer.h"
#include "topotrain/train/adamw.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/step_profile.h"

using namespace topotrain;

namespace {

const torch::Device kGpu(torch::kCUDA, 0);

cudaStream_t compute_stream() { return c10::cuda::getCurrentCUDAStream(0).stream(); }
double seconds_of(const StepRecord& record, Phase phase) {
  return record.phase_seconds[static_cast<std::size_t>(phase)];
}

// Large enough that the device, not the host's launches, sets the pace, even with the
// profiler's overhead on every host call: event times include the device's idle gaps
// inside a phase, kernel totals do not.
model::ModelConfig device_bound_config() {
  model::ModelConfig c;
  c.source = "phase timer GPU test";
  c.vocab_size = 32768, c.hidden_size = 2048, c.intermediate_size = 8192, c.num_hidden_layers = 4;
  c.num_attention_heads = 16, c.num_key_value_heads = 8, c.head_dim = 128;
  c.tie_word_embeddings = true;
  c.validate();
  return c;
}

PackedBatch random_batch(const model::ModelConfig& config, int documents, std::int64_t length) {
  const torch::Tensor tokens = torch::randint(config.vocab_size, {documents, length}, torch::kInt64).contiguous();
  std::vector<std::vector<std::int64_t>> docs;
  for (int d = 0; d < documents; ++d) {
    const std::int64_t* row = tokens[d].data_ptr<std::int64_t>();
    docs.emplace_back(row, row + length);
  }
  return PackedBatch::from_documents(docs).to(kGpu);
}

void train_step(model::CausalLMImpl& net, AdamW& optimizer, const PackedBatch& batch, PhaseTimer& timer) {
  torch::Tensor loss;
  {
    auto t = timer.scope(Phase::forward, compute_stream());
    const model::BackboneOutput out = net.forward_backbone(batch);
    loss = model::lm_loss(net, out.hidden, batch).loss_sum / static_cast<double>(batch.num_tokens());
  }
  {
    auto t = timer.scope(Phase::backward, compute_stream());
    loss.backward();
  }
  auto t = timer.scope(Phase::optimizer, compute_stream());
  optimizer.step(1e-4);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST(PhaseTimerGpu, PhasesOfAProfiledStepAgreeWithTheProfilersKernelTotals) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  torch::manual_seed(5);
  const model::ModelConfig config = device_bound_config();
  model::CausalLM net(config);
  net->to(kGpu);
  net->set_compute_dtype(torch::kBFloat16);
  const NamedParameters parameters = named_parameters_of(*net);
  AdamW optimizer(parameters, AdamWConfig{});
  const PackedBatch batch = random_batch(config, 8, 2048);
  const std::string dir = make_temp_directory("phase_timer_gpu");
  const std::int64_t profiled_step = 3;  // after two warm-up steps
  StepProfile profile({profiled_step, 1, true}, dir, 0, kGpu);
  PhaseTimer timer;
  for (std::int64_t step = 1; step <= profiled_step; ++step) {
    for (const auto& named : parameters) named.second.mutable_grad() = torch::Tensor();  // no kernel
    auto profiled = profile.step(step);
    timer.begin_step(step);
    train_step(*net, optimizer, batch, timer);
    timer.end_step({});
  }
  timer.finish();
  const std::vector<StepRecord> records = timer.take_finished();
  ASSERT_EQ(records.size(), 3u);
  const StepRecord& r = records.back();
  const double forward = seconds_of(r, Phase::forward), backward = seconds_of(r, Phase::backward),
               adamw = seconds_of(r, Phase::optimizer);
  EXPECT_GT(forward, 0);
  EXPECT_GT(backward, forward);
  EXPECT_GT(adamw, 0);
  EXPECT_LT(r.overlap_seconds, 1e-5);  // one stream: nothing ran at once

  const std::string summary = read_text(profile.summary_path());
  std::smatch busy;
  ASSERT_TRUE(std::regex_search(summary, busy, std::regex("busy ([0-9.]+) ms"))) << summary;
  const double kernels_ms = std::stod(busy[1].str());
  const double phases_ms = 1e3 * (forward + backward + adamw);
  EXPECT_NEAR(phases_ms, kernels_ms, 0.10 * kernels_ms)
      << "forward " << forward * 1e3 << " ms, backward " << backward * 1e3 << " ms, optimizer " << adamw * 1e3
      << " ms\n" << summary.substr(0, 4000);
  std::printf("profiled step: phases %.2f ms (forward %.2f, backward %.2f, optimizer %.2f), profiler busy %.2f ms\n",
              phases_ms, forward * 1e3, backward * 1e3, adamw * 1e3, kernels_ms);
  remove_tree(dir);
}

TEST(PhaseTimerGpu, TheAllReducesDeviceTimeComesFromTheNcclStream) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  int ranks = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  auto backend = comm::make_backend(MPI_COMM_WORLD, Device::cuda(0));
  backend->time_collectives(true);
  const auto options = torch::TensorOptions().device(kGpu);
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (int i = 0; i < 6; ++i) weights.emplace_back("w" + std::to_string(i), (torch::randn({2048, 2048}, options) * 0.02).requires_grad_());
  comm::GradReducerConfig config;
  config.first_bucket_mb = 1;
  config.bucket_mb = 16;  // one 16 MB weight per bucket
  comm::GradReducer reducer(weights, *backend, config);
  const torch::Tensor x = torch::randn({16384, 2048}, options);

  PhaseTimer timer;
  timer.begin_step(1);
  reducer.begin_micro_batch(true);
  torch::Tensor h = x;
  for (const auto& named : weights) h = torch::tanh(h.mm(named.second));
  {
    auto t = timer.scope(Phase::backward, compute_stream());
    h.sum().backward();
  }
  reducer.finish();
  DeviceSpans spans = reducer.take_device_spans();
  EXPECT_EQ(static_cast<std::int64_t>(spans.size()), reducer.collectives());
  EXPECT_GE(spans.size(), 6u);
  EXPECT_TRUE(reducer.take_device_spans().empty());  // moved out
  timer.add_gpu_spans(Phase::comm_wait, std::move(spans));
  timer.end_step({});
  timer.finish();
  const std::vector<StepRecord> records = timer.take_finished();
  ASSERT_EQ(records.size(), 1u);
  const StepRecord& r = records[0];
  const PhaseSpan* backward = nullptr;
  std::vector<const PhaseSpan*> comm;
  for (const PhaseSpan& span : r.spans) {
    EXPECT_TRUE(span.gpu);
    if (span.phase == Phase::backward) backward = &span;
    if (span.phase == Phase::comm_wait) comm.push_back(&span);
  }
  ASSERT_NE(backward, nullptr);
  ASSERT_EQ(comm.size(), static_cast<std::size_t>(reducer.collectives()));
  // The first bucket was launched while backward ran: on the device timeline it starts
  // after backward began and before it ended.
  const double backward_end = backward->start + backward->seconds;
  const auto earliest = *std::min_element(comm.begin(), comm.end(), [](auto a, auto b) { return a->start < b->start; });
  EXPECT_GT(earliest->start, backward->start);
  EXPECT_LT(earliest->start, backward_end);
  EXPECT_GE(r.comm_overlap_seconds, 0);
  EXPECT_LE(r.comm_overlap_seconds, seconds_of(r, Phase::comm_wait) + 1e-6);
  EXPECT_NEAR(r.overlap_seconds, r.comm_overlap_seconds, 1e-6);  // the only phases that may overlap
  std::printf("%d rank(s): backward %.3f ms, all-reduce %.3f ms in %zu buckets, %.3f ms of it under backward\n",
              ranks, seconds_of(r, Phase::backward) * 1e3, seconds_of(r, Phase::comm_wait) * 1e3, comm.size(),
              r.comm_overlap_seconds * 1e3);
}

TEST(PhaseTimerGpu, SpansOfAnotherStreamLineUpWithTheComputeStreamsScopes) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  const torch::Tensor a = torch::randn({4096, 4096}, torch::TensorOptions().device(kGpu).dtype(torch::kBFloat16));
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, 0);
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(0);
  auto work = [&] {
    torch::Tensor b = a;
    for (int i = 0; i < 40; ++i) b = torch::mm(a, b) * 0.01;
    return b;
  };
  at::cuda::CUDAEvent half_way, compute_end(cudaEventDefault), side_begin(cudaEventDefault), side_end(cudaEventDefault);
  PhaseTimer timer;
  timer.begin_step(1);
  torch::Tensor first, second, third;
  {
    auto t = timer.scope(Phase::backward, compute.stream());
    first = work();
    half_way.record(compute);
    second = work();
  }
  compute_end.record(compute);
  // The side stream starts once the compute stream is half way: its span overlaps the
  // second half. The reference events sit right next to the timer's.
  DeviceSpans spans;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    half_way.block(side);
    spans.emplace_back(side.stream());
    side_begin.record(side);
    third = work();
    side_end.record(side);
    spans.back().close();
  }
  timer.add_gpu_spans(Phase::comm_wait, std::move(spans));
  timer.end_step({});
  torch::cuda::synchronize();
  timer.finish();
  const std::vector<StepRecord> records = timer.take_finished();
  ASSERT_EQ(records.size(), 1u);
  const StepRecord& r = records[0];
  const double ends_first = std::min(side_begin.elapsed_time(compute_end), side_begin.elapsed_time(side_end)) * 1e-3;
  const double expected = std::max(0.0, ends_first);
  EXPECT_GT(expected, 1e-4);
  EXPECT_NEAR(r.comm_overlap_seconds, expected, 0.05 * expected + 2e-5);
  EXPECT_NEAR(r.overlap_seconds, r.comm_overlap_seconds, 1e-6);
  EXPECT_NEAR(seconds_of(r, Phase::comm_wait), side_begin.elapsed_time(side_end) * 1e-3, 0.05 * expected + 2e-5);
  EXPECT_NEAR(r.other_seconds(), r.wall - r.named_seconds() + r.overlap_seconds, 1e-12);
}
