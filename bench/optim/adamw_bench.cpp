// AdamW's step on a GPU, side by side in one process: our kernel (train/adamw.h) against
// torch's fused multi-tensor kernel (at::_fused_adamw_), over the parameters of a model
// (a preset name or an HF config.json), gradients held in one flat buffer as the GradReducer
// holds them. Prints ms per step and the bytes each moves per second (parameter, gradient and
// both moments read, parameter and moments written: 28 bytes an element; torch writes the
// gradients back too when asked to scale them, 32).
//   adamw_bench moe-500m [steps]      adamw_bench path/to/config.json [steps]
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "topotrain/model/causal_lm.h"
#include "topotrain/model/config.h"
#include "topotrain/torch_compat.h"
#include "topotrain/train/adamw.h"

#ifdef TOPOTRAIN_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mdl = topotrain::model;

int main(int argc, char** argv) {
#ifdef TOPOTRAIN_CUDA
  if (argc < 2 || !torch::cuda::is_available()) {
    std::fprintf(stderr, "usage: adamw_bench PRESET|config.json [steps] (needs a GPU)\n");
    return 2;
  }
  const std::string model_name = argv[1];
  const int steps = argc > 2 ? std::stoi(argv[2]) : 20;
  const auto config = model_name.size() > 5 && model_name.substr(model_name.size() - 5) == ".json"
                          ? mdl::ModelConfig::from_json_file(model_name)
                          : mdl::ModelConfig::preset(model_name);
  mdl::CausalLM model(config);
  model->to(torch::kCUDA);
  std::vector<std::pair<std::string, torch::Tensor>> params;
  int64_t total = 0;
  for (const auto& item : model->named_parameters()) {
    params.emplace_back(item.key(), item.value());
    total += item.value().numel();
  }
  auto grads = torch::randn({total}, torch::TensorOptions().device(torch::kCUDA)) * 1e-3;
  int64_t offset = 0;
  for (auto& [name, p] : params) {
    p.mutable_grad() = grads.narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
  }
  std::printf("%s: %zu tensors, %.1fM parameters\n", model_name.c_str(), params.size(), total / 1e6);

  auto time_steps = [&](const char* what, double bytes_per_element, auto&& step) {
    for (int i = 0; i < 3; ++i) step();  // warm-up
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    const auto stream = c10::cuda::getCurrentCUDAStream();
    start.record(stream);
    for (int i = 0; i < steps; ++i) step();
    stop.record(stream);
    stop.synchronize();
    const double ms = start.elapsed_time(stop) / steps;
    std::printf("  %-44s %7.3f ms/step  %6.2f TB/s\n", what, ms, bytes_per_element * total / (ms * 1e9));
  };

  torch::NoGradGuard no_grad;
  topotrain::AdamW ours(params, {});
  time_steps("ours, gradient factor 1", 28, [&] { ours.step(1e-4); });
  time_steps("ours, gradient factor 0.5", 28, [&] { ours.step(1e-4, 0.5); });
  // torch's kernel, with the same two groups AdamW decays and does not.
  struct Group {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    double weight_decay;
  };
  std::vector<Group> groups{{{}, {}, {}, {}, 0.1}, {{}, {}, {}, {}, 0.0}};
  for (auto& [name, p] : params) {
    Group& g = groups[p.dim() >= 2 ? 0 : 1];
    g.params.push_back(p);
    g.grads.push_back(p.grad());
    g.exp_avgs.push_back(torch::zeros_like(p));
    g.exp_avg_sqs.push_back(torch::zeros_like(p));
  }
  const auto options = torch::TensorOptions().device(torch::kCUDA);
  const auto step_count = torch::ones({}, options);
  for (bool scaled : {false, true}) {
    const std::optional<at::Tensor> grad_scale =
        scaled ? std::optional<at::Tensor>(torch::full({}, 2.0, options)) : std::nullopt;
    time_steps(scaled ? "torch _fused_adamw_, grad_scale 2" : "torch _fused_adamw_", scaled ? 32 : 28, [&] {
      for (auto& g : groups) {
        if (g.params.empty()) continue;
        std::vector<at::Tensor> counts(g.params.size(), step_count);
        at::_fused_adamw_(g.params, g.grads, g.exp_avgs, g.exp_avg_sqs, {}, counts, 1e-4, 0.9, 0.95, g.weight_decay,
                          1e-8, /*amsgrad=*/false, /*maximize=*/false, grad_scale);
      }
    });
  }
  return 0;
#else
  (void)argc, (void)argv;
  std::fprintf(stderr, "adamw_bench: needs a CUDA build of torch >= 2.0\n");
  return 2;
#endif
}
