// Forward + backward throughput of one micro-batch on one GPU, in the training setup
// (fp32 master weights, bf16 compute, chunked LM loss, MoE aux loss).
//
//   model_bench PRESET [TOKENS=16384] [DOC_LEN=2048] [STEPS=10] [PROFILE_DIR]
//
// With PROFILE_DIR, one more step runs under torch's profiler and its summary (kernels by
// time, GPU busy share, host calls) goes to PROFILE_DIR/profile-step1-rank0.txt.
//
// MFU = training matmul FLOPs per token (3 x model::forward_flops_per_token) x tokens/s over 989 TFLOP/s,
// the dense bf16 peak of an H100/H200 SXM.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "topotrain/model/config.h"
#include "topotrain/model/lm_loss.h"
#include "topotrain/model/qwen3.h"
#include "topotrain/train/step_profile.h"

namespace mdl = topotrain::model;

namespace {

constexpr double kPeakFlops = 989e12;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PRESET [TOKENS=16384] [DOC_LEN=2048] [STEPS=10] [PROFILE_DIR]\n", argv[0]);
    return 2;
  }
  const std::string preset = argv[1];
  const int64_t tokens = argc > 2 ? std::stoll(argv[2]) : 16384;
  const int64_t doc_len = argc > 3 ? std::stoll(argv[3]) : 2048;
  const int steps = argc > 4 ? std::stoi(argv[4]) : 10;
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "model_bench needs a GPU\n");
    return 2;
  }
  const torch::Device device(torch::kCUDA, 0);
  torch::manual_seed(0);
  const auto config = mdl::ModelConfig::preset(preset);
  std::printf("%s\n", mdl::describe(config).c_str());
  mdl::Qwen3CausalLM model(config);
  model->to(device);
  model->set_compute_dtype(mdl::default_compute_dtype(device));

  std::vector<std::vector<int64_t>> docs;
  for (int64_t begin = 0; begin < tokens; begin += doc_len) {
    auto t = torch::randint(config.vocab_size, {std::min(doc_len, tokens - begin)}, torch::kInt64);
    docs.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  }
  const auto batch = mdl::PackedBatch::from_documents(docs).to(device);

  auto step = [&] {
    auto out = model->forward_backbone(batch);
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
  const double mfu = tokens_per_s * 3.0 * mdl::forward_flops_per_token(config, static_cast<double>(doc_len)) / kPeakFlops;
  std::printf("%s: %lld tokens/micro-batch (docs of %lld), attention %s, experts %s, elementwise %s: %.1f ms "
              "fwd+bwd, %.0f tokens/s, MFU %.1f%%\n",
              preset.c_str(), static_cast<long long>(tokens), static_cast<long long>(doc_len),
              mdl::to_string(model->attention_backend()).c_str(),
              config.is_moe() ? mdl::to_string(model->expert_backend()).c_str() : "-",
              model->elementwise_backend().c_str(), seconds * 1e3, tokens_per_s, mfu * 100);
  if (argc > 5) {
    topotrain::StepProfile profile(1, argv[5], 0, device);
    auto profiled = profile.step(1);
    step();
  }
  return 0;
}
