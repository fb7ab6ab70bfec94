// Forward + backward throughput of one micro-batch on one GPU, in the training setup
// (fp32 master weights, bf16 compute, chunked LM loss, MoE aux loss). No optimizer step runs,
// so the weights' bf16 copies are made once (a trainer makes them once per step).
//
//   model_bench PRESET|CONFIG.json [TOKENS=16384] [DOC_LEN=2048 | MIN-MAX] [STEPS=10] [PROFILE_DIR]
//   MODEL_BENCH_ATTENTION=flash|grid|math model_bench ...   (forces an attention backend)
//
// With PROFILE_DIR, one more step runs under torch's profiler and its summary (kernels by
// time, GPU busy share, host calls) goes to PROFILE_DIR/profile-step1-rank0.txt.
//
// MFU = training matmul FLOPs per token (3 x model::forward_flops_per_token) x tokens/s over 989 TFLOP/s,
// the dense bf16 peak of an H100/H200 SXM.
//
// MODEL_BENCH_FROZEN_TAPS=1,9,17,25,33 (decoder layers, or "-" for none) times a frozen DFlash
// target's forward instead: weights held in bf16, no gradients, forward_backbone returning those
// taps' hidden states, no LM head (what dflash_train's target ranks run; its reference is
// bench/dflash/target_forward_reference.py). Its MFU counts 1 x backbone_forward_flops_per_token
// (no LM head), as the target rank's timings do.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "topotrain/model/causal_lm.h"
#include "topotrain/model/config.h"
#include "topotrain/model/lm_loss.h"
#include "topotrain/model/model_cost.h"
#include "topotrain/train/step_profile.h"

namespace mdl = topotrain::model;
using topotrain::PackedBatch;

namespace {

constexpr double kPeakFlops = 989e12;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s PRESET|CONFIG.json [TOKENS=16384] [DOC_LEN=2048 | MIN-MAX] [STEPS=10] [PROFILE_DIR]\n"
                 "  CONFIG.json: an HF config.json (bench/moe/reference_shape.py writes the reference shape's)\n"
                 "  MIN-MAX: document lengths drawn uniformly from [MIN, MAX] (seeded), the last one cut to fit\n"
                 "  MODEL_BENCH_ATTENTION=flash|grid|math forces an attention backend\n"
                 "  MODEL_BENCH_FROZEN_TAPS=L1,L2,...|- times a frozen DFlash target's forward (bf16 weights, no grad)\n",
                 argv[0]);
    return 2;
  }
  const std::string preset = argv[1];
  const int64_t tokens = argc > 2 ? std::stoll(argv[2]) : 16384;
  const std::string doc_arg = argc > 3 ? argv[3] : "2048";
  const auto dash = doc_arg.find('-');
  int64_t min_len = 0, max_len = 0;
  try {
    min_len = std::stoll(doc_arg.substr(0, dash));
    max_len = dash == std::string::npos ? min_len : std::stoll(doc_arg.substr(dash + 1));
  } catch (const std::exception&) {  // left 0: refused below
  }
  if (min_len < 1 || max_len < min_len) {
    std::fprintf(stderr, "DOC_LEN %s: give a length N >= 1 or a range MIN-MAX with 1 <= MIN <= MAX\n", doc_arg.c_str());
    return 2;
  }
  const int steps = argc > 4 ? std::stoi(argv[4]) : 10;
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "model_bench needs a GPU\n");
    return 2;
  }
  const torch::Device device(torch::kCUDA, 0);
  torch::manual_seed(0);
  const bool from_file = preset.size() > 5 && preset.compare(preset.size() - 5, 5, ".json") == 0;
  const auto config = from_file ? mdl::ModelConfig::from_json_file(preset) : mdl::ModelConfig::preset(preset);
  std::printf("%s\n", mdl::describe(config).c_str());
  // A frozen target's forward: its taps, or none ("-").
  std::vector<int64_t> taps;
  const char* frozen_taps = std::getenv("MODEL_BENCH_FROZEN_TAPS");
  const bool frozen = frozen_taps && *frozen_taps;
  if (frozen && std::string(frozen_taps) != "-") {
    std::stringstream list(frozen_taps);
    for (std::string item; std::getline(list, item, ',');) {
      char* end = nullptr;
      const long long layer = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || layer < 0 || layer >= config.num_hidden_layers) {
        std::fprintf(stderr, "MODEL_BENCH_FROZEN_TAPS=%s: give decoder layers in [0, %lld) separated by commas, or -\n",
                     frozen_taps, static_cast<long long>(config.num_hidden_layers));
        return 2;
      }
      taps.push_back(layer);
    }
  }
  mdl::CausalLM model(config);
  model->to(device);
  model->set_compute_dtype(mdl::default_compute_dtype(device));
  if (frozen) model->to(mdl::default_compute_dtype(device));  // a frozen target keeps no fp32 masters
  if (const char* forced = std::getenv("MODEL_BENCH_ATTENTION"); forced && *forced) {
    const std::string name = forced;
    if (name != "flash" && name != "grid" && name != "math") {
      std::fprintf(stderr, "MODEL_BENCH_ATTENTION=%s: use flash, grid or math (or leave it unset)\n", forced);
      return 2;
    }
    model->force_attention_backend(name == "flash"  ? mdl::AttentionBackend::flash_varlen
                                   : name == "grid" ? mdl::AttentionBackend::dense_grid
                                                    : mdl::AttentionBackend::math_per_document);
  }

  std::vector<std::vector<int64_t>> docs;
  double square_sum = 0;  // of the lengths: attention's work grows with each document's length squared
  for (int64_t begin = 0; begin < tokens;) {
    const int64_t drawn = min_len + (max_len > min_len ? torch::randint(max_len - min_len + 1, {1}).item<int64_t>() : 0);
    const int64_t len = std::min(drawn, tokens - begin);
    auto t = torch::randint(config.vocab_size, {len}, torch::kInt64);
    docs.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    square_sum += static_cast<double>(len) * static_cast<double>(len);
    begin += len;
  }
  const auto batch = PackedBatch::from_documents(docs).to(device);
  // What this batch's attention runs (the model lays it out the same way in every forward).
  const std::string attention = mdl::describe(model->layer_context(batch).documents);

  torch::Tensor peak_load;  // the busiest expert's rows over the mean, last step (1.00: even)
  auto step = [&] {
    if (frozen) {
      torch::NoGradGuard no_grad;
      peak_load = model->forward_backbone(batch, taps).peak_expert_load;
      return;
    }
    auto out = model->forward_backbone(batch);
    peak_load = out.peak_expert_load;
    auto lm = mdl::lm_loss(*model, out.hidden, batch);
    (lm.loss_sum / static_cast<double>(lm.num_targets) + config.router_aux_loss_coef * out.aux_loss).backward();
  };
  for (int i = 0; i < 3; ++i) step();
  torch::cuda::synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  torch::cuda::synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
  const double tokens_per_s = static_cast<double>(tokens) / seconds;
  // A token's mean causal context over these documents is sum(len^2) / (2 sum(len)).
  const double context = square_sum / static_cast<double>(tokens);
  const double flops_per_token =
      frozen ? mdl::backbone_forward_flops_per_token(config, context) : 3.0 * mdl::forward_flops_per_token(config, context);
  const double mfu = tokens_per_s * flops_per_token / kPeakFlops;
  std::printf("%s: %lld tokens/micro-batch (%zu docs of %s), attention %s, experts %s, elementwise %s: %.1f ms "
              "%s, %.0f tokens/s, MFU %.1f%%, peak expert load %.2f\n",
              preset.c_str(), static_cast<long long>(tokens), docs.size(), doc_arg.c_str(), attention.c_str(),
              config.is_moe() ? mdl::to_string(model->expert_backend()).c_str() : "-",
              model->elementwise_backend().c_str(), seconds * 1e3,
              frozen ? ("frozen forward, " + std::to_string(taps.size()) + " taps").c_str() : "fwd+bwd", tokens_per_s,
              mfu * 100, peak_load.item<double>());
  if (argc > 5) {
    topotrain::StepProfile profile({1, 1, true}, argv[5], 0, device);
    auto profiled = profile.step(1);
    step();
  }
  return 0;
}
