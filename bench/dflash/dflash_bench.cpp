// Forward + backward throughput of the DFlash drafter alone on one GPU, in the training
// setup (fp32 master weights, bf16 compute, chunked weighted CE through the frozen lm_head),
// with random qwen3-8b-shaped target tensors and random taps.
//
//   dflash_bench [TOKENS=16384] [DOC_LEN=4096] [ANCHORS=512] [STEPS=10] [BACKENDS=sdpa,sdpa-exact,math] [PROFILE_DIR]
//
// BACKENDS: sdpa (bucketed chunk shapes, the default), sdpa-exact (shapes unbucketed), math;
// sdpa may carry -b<N> (at most N blocks a chunk, max_chunk_blocks) and -m<N> (context
// padded to a multiple of N rows, sdpa_context_multiple): the chunk shape's trade of wasted
// scores against kernel calls, measured (e.g. sdpa-b16-m256).
//
// With PROFILE_DIR, one more step of the last backend runs under torch's profiler and its
// summary goes to PROFILE_DIR/profile-step1-rank0.txt.
//
// MFU counts the matmul FLOPs the step performs (model::dflash_step_flops) over 989 TFLOP/s, the
// dense bf16 peak of an H100/H200 SXM.
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "topotrain/model/dflash_drafter.h"
#include "topotrain/model/dflash_metrics.h"
#include "topotrain/train/step_profile.h"

namespace mdl = topotrain::model;
using topotrain::PackedBatch;

namespace {

constexpr double kPeakFlops = 989e12;

mdl::DFlashAttentionOptions attention_options(const std::string& name) {
  mdl::DFlashAttentionOptions options;
  if (name == "math") return options;
  options.backend = mdl::DFlashAttentionBackend::sdpa_chunked;
  if (name == "sdpa-exact") {
    options.sdpa_context_multiple = 0;
    return options;
  }
  std::stringstream parts(name);
  std::string part;
  std::getline(parts, part, '-');
  if (part != "sdpa") throw std::invalid_argument("dflash_bench: unknown backend '" + name + "'");
  while (std::getline(parts, part, '-')) {
    const bool known = part.size() > 1 && (part[0] == 'b' || part[0] == 'm') &&
                       part.find_first_not_of("0123456789", 1) == std::string::npos;
    if (!known) {
      throw std::invalid_argument("dflash_bench: backend '" + name + "': '" + part +
                                  "' is neither b<blocks a chunk> nor m<context multiple>");
    }
    (part[0] == 'b' ? options.max_chunk_blocks : options.sdpa_context_multiple) = std::stoll(part.substr(1));
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t tokens = argc > 1 ? std::stoll(argv[1]) : 16384;
  const int64_t doc_len = argc > 2 ? std::stoll(argv[2]) : 4096;
  const int64_t anchors = argc > 3 ? std::stoll(argv[3]) : 512;
  const int steps = argc > 4 ? std::stoi(argv[4]) : 10;
  // Every name is read before the model is built: a typo fails at once.
  std::vector<std::pair<std::string, mdl::DFlashAttentionOptions>> backends;
  std::stringstream list(argc > 5 ? argv[5] : "sdpa,sdpa-exact,math");
  try {
    for (std::string name; std::getline(list, name, ',');) backends.emplace_back(name, attention_options(name));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "dflash_bench needs a GPU\n");
    return 2;
  }
  const torch::Device device(torch::kCUDA, 0);
  torch::manual_seed(0);
  mdl::DFlashConfig config;
  config.source = "dflash_bench";
  config.target = mdl::ModelConfig::preset("qwen3-8b");
  config.mask_token_id = 151669;
  config.max_anchors = anchors;
  mdl::DFlashDrafter drafter(config);
  drafter->to(device);
  drafter->set_compute_dtype(torch::kBFloat16);

  mdl::DFlashBatch batch;
  std::vector<std::vector<int64_t>> docs;
  for (int64_t begin = 0; begin < tokens; begin += doc_len) {
    auto t = torch::randint(config.target.vocab_size, {std::min(doc_len, tokens - begin)}, torch::kInt64);
    docs.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  }
  auto host = PackedBatch::from_documents(docs);
  batch.packed = host.to(device);
  batch.taps = torch::randn({tokens, static_cast<int64_t>(drafter->taps().size()) * config.target.hidden_size},
                            torch::TensorOptions().dtype(torch::kBFloat16).device(device));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  const auto blocks = mdl::sample_anchors(host.cu_seqlens, host.loss_mask, config.block_size, anchors, gen);
  std::printf("drafter: %lld layers of qwen3-8b shape, %.2fB trainable parameters, taps",
              static_cast<long long>(config.num_draft_layers), mdl::count_drafter_parameters(config) / 1e9);
  for (int64_t t : drafter->taps()) std::printf(" %lld", static_cast<long long>(t));
  std::printf("; %lld tokens in docs of %lld, %lld blocks of %lld (%lld loss slots)\n", static_cast<long long>(tokens),
              static_cast<long long>(doc_len), static_cast<long long>(blocks.num_blocks()),
              static_cast<long long>(config.block_size), static_cast<long long>(blocks.num_valid_slots()));

  for (const auto& [name, options] : backends) {
    drafter->force_attention_options(options);
    auto step = [&] {
      auto out = drafter->forward(batch, blocks);
      (out.loss_sum / out.weight_sum).backward();
    };
    // Mean seconds of `body` over `steps` runs after two warm-up runs.
    auto seconds_of = [&](const std::function<void()>& body) {
      for (int i = 0; i < 2; ++i) body();
      torch::cuda::synchronize();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) body();
      torch::cuda::synchronize();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
    };
    try {
      const double seconds = seconds_of(step);
      // Where the step goes: the layers alone, then with the loss through the frozen lm_head.
      const double layers = seconds_of([&] { drafter->forward_blocks(batch, blocks); });
      const double forward = seconds_of([&] { drafter->forward(batch, blocks); });
      const double mfu = mdl::dflash_step_flops(config, blocks, tokens) / seconds / kPeakFlops;
      std::printf("attention %s: %.1f ms fwd+bwd (fwd %.1f, of which layers %.1f), %.0f context tokens/s, "
                  "%.0f block tokens/s, MFU %.1f%%\n",
                  (name + ", " + mdl::to_string(options.backend)).c_str(), seconds * 1e3, forward * 1e3, layers * 1e3,
                  static_cast<double>(tokens) / seconds,
                  static_cast<double>(blocks.num_blocks() * config.block_size) / seconds, mfu * 100);
    } catch (const std::exception& e) {
      std::printf("attention %s: failed: %s\n", name.c_str(), e.what());
    }
    if (argc > 6) {
      topotrain::StepProfile profile({1, 1, true}, argv[6], 0, device);
      auto profiled = profile.step(1);
      step();
    }
    drafter->zero_grad();
  }
  return 0;
}
