// Packing + prefetch throughput from memory: tokens per second that one core turns into
// packed micro-batches (tokens, positions, cu_seqlens, loss mask, sample ids).
//   bench_data_packing [total_tokens_millions] [token_budget] [world] [grad_accum]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "topotrain/data/prefetcher.h"

using namespace topotrain::data;
using topotrain::PackedBatch;

namespace {

std::shared_ptr<const TokenDataset> synthetic(uint64_t total_tokens) {
  std::mt19937_64 rng(1);
  TokenDatasetContents c;
  c.vocab_size = 151936;
  c.tokens.resize(total_tokens);
  for (auto& t : c.tokens) t = static_cast<uint32_t>(rng() % c.vocab_size);
  c.loss_mask.assign(total_tokens, 1);
  for (uint64_t at = 0; at < total_tokens;) {
    const uint64_t length = std::min<uint64_t>(64 + rng() % 4000, total_tokens - at);  // chat-sized samples
    at += length;
    c.offsets.push_back(at);
  }
  return std::make_shared<const TokenDataset>(TokenDataset::from_contents(std::move(c), "synthetic"));
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  const uint64_t total = uint64_t(argc > 1 ? std::atof(argv[1]) : 200) * 1000000;
  const uint64_t budget = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 65536;
  const int world = argc > 3 ? std::atoi(argv[3]) : 1;
  const int accum = argc > 4 ? std::atoi(argv[4]) : 1;
  const auto data = synthetic(total);
  const PackerConfig packing{budget, LongSamplePolicy::split, true, false, {}};
  const DataParallelConfig parallel{world, 0, accum};
  std::printf("dataset: %.0f M tokens, %llu samples (with loss mask); token_budget %llu, world %d, grad_accum %d\n",
              total / 1e6, (unsigned long long)data->num_samples(), (unsigned long long)budget, world, accum);

  // One epoch's worth of this rank's tokens, planned and packed on the calling thread.
  StepPlanner direct(data, packing, parallel, DataPosition{1, 0, 0, 0});
  uint64_t tokens = 0, steps = 0;
  auto start = std::chrono::steady_clock::now();
  while (direct.position().epoch == 0) {
    for (const PackedBatch& b : direct.next_step().micro_batches) tokens += b.num_tokens();
    ++steps;
  }
  const double direct_s = seconds_since(start);
  std::printf("pack (caller thread):      %8.1f M tokens/s of this rank  (%llu steps, %.3f ms/step)\n",
              tokens / direct_s / 1e6, (unsigned long long)steps, 1e3 * direct_s / steps);

  // The same through the prefetcher: the trainer side only takes the steps.
  auto planner = std::make_shared<StepPlanner>(data, packing, parallel, DataPosition{1, 0, 0, 0});
  uint64_t prefetched = 0;
  start = std::chrono::steady_clock::now();
  {
    Prefetcher prefetcher([planner] { return planner->next_step(); }, PrefetchConfig{4, torch::kCPU});
    for (uint64_t s = 0; s < steps; ++s) {
      for (const PackedBatch& b : prefetcher.next().micro_batches) prefetched += b.num_tokens();
    }
  }
  const double prefetch_s = seconds_since(start);
  std::printf("pack + prefetch (1 thread): %7.1f M tokens/s of this rank  (%.3f ms/step)\n",
              prefetched / prefetch_s / 1e6, 1e3 * prefetch_s / steps);
  return 0;
}
