// Compares topotrain's model (any family of tests/hf/hf_parity.py's cases) with HF transformers
// on the reference hf_parity.py writes (tests/hf/model_logits.sh runs both, ctest hf_logits):
// logits (max |a - b| / max |b|) and the gradients of one backward (||a - b|| / ||b|| per
// tensor), in fp32 and in the bf16 training configuration.
//
//   hf_parity CASE_DIR                        (CASE_DIR holds model/ and reference.safetensors)
//   hf_parity CASE_DIR --weights CHECKPOINT   (the export check: topotrain's model is the
//       topotrain checkpoint or run directory, with the config it stores, and HF's the
//       export of it that hf_parity.py --export loaded; fp32 logits and losses, no gradients:
//       a model with 2 * moe_intermediate_size == hidden_size, tiny-moe's, leaves the layout
//       of HF's fused expert gradients ambiguous to hf_parity.py)
//
// Exit status 0 when every comparison is within its bound.
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/hf_checkpoint.h"
#include "topotrain/model/lm_loss.h"
#include "topotrain/model/safetensors.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/training_checkpoint.h"

namespace mdl = topotrain::model;
using topotrain::PackedBatch;

namespace {

struct Bounds {
  double logits;  // also the loss and the MoE aux loss
  double grads;   // 0: no backward, gradients not compared
};

// The model under test: HF's files in CASE_DIR/model, or a topotrain checkpoint.
mdl::CausalLM load_model(const std::string& dir, const std::string& checkpoint) {
  if (checkpoint.empty()) {
    mdl::CausalLM model(mdl::ModelConfig::from_json_file(dir + "/model/config.json"));
    mdl::load_hf_checkpoint(*model, dir + "/model");
    return model;
  }
  const auto config = topotrain::stored_model_config(checkpoint, topotrain::CheckpointReader::load_header(checkpoint));
  if (!config) throw topotrain::ConfigError(checkpoint + " stores no model config");
  mdl::CausalLM model(*config);
  topotrain::load_model_tensors(checkpoint, topotrain::named_parameters_of(*model));
  return model;
}

double max_relative(const torch::Tensor& a, const torch::Tensor& b) {
  auto a64 = a.to(torch::kCPU, torch::kFloat64), b64 = b.to(torch::kCPU, torch::kFloat64);
  return ((a64 - b64).abs().max() / b64.abs().max()).item<double>();
}

double norm_relative(const torch::Tensor& a, const torch::Tensor& b) {
  auto a64 = a.to(torch::kCPU, torch::kFloat64), b64 = b.to(torch::kCPU, torch::kFloat64);
  return ((a64 - b64).norm() / b64.norm().clamp_min(1e-30)).item<double>();
}

// One forward (and backward, when gradients are compared) of reference file `batch_file` in
// `dtype` on `device`, with the kernels the model picks or the reference ones (math
// attention, the per-expert loop); returns false when out of bounds.
bool compare(const std::string& dir, const std::string& checkpoint, const std::string& batch_file,
             const torch::Device& device, torch::ScalarType dtype, bool reference_kernels, const Bounds& bounds) {
  const mdl::SafetensorsCheckpoint ref(dir + "/" + batch_file);
  mdl::CausalLM model = load_model(dir, checkpoint);
  model->to(device);
  model->set_compute_dtype(dtype);
  if (reference_kernels) {
    model->force_attention_backend(mdl::AttentionBackend::math_per_document);
    model->force_expert_backend(mdl::ExpertBackend::sorted_loop);
  }
  PackedBatch batch;
  batch.tokens = ref.load("tokens");
  batch.positions = ref.load("positions");
  batch.cu_seqlens = ref.load("cu_seqlens");
  batch.summarize();
  batch = batch.to(device);

  auto out = model->forward_backbone(batch);
  auto all_rows = torch::arange(batch.num_tokens(), batch.tokens.options());
  const double logits_err = max_relative(model->logits_at(out.hidden, all_rows), ref.load("logits"));
  auto lm = mdl::lm_loss(*model, out.hidden, batch);
  const double ce_err = max_relative(lm.loss_sum, ref.load("ce_sum"));
  const double aux_err = model->config().is_moe() ? max_relative(out.aux_loss, ref.load("aux_loss")) : 0.0;

  bool ok = logits_err <= bounds.logits && ce_err <= bounds.logits && aux_err <= bounds.logits;
  char grads_text[160] = "grads not compared";
  if (bounds.grads > 0) {
    (lm.loss_sum + model->config().router_aux_loss_coef * out.aux_loss).backward();
    mdl::NamedTensors grads;
    for (const auto& item : model->named_parameters()) grads.emplace_back(item.key(), item.value().grad());
    double worst_grad = 0.0;
    std::string worst_name;
    for (const auto& [name, grad] : mdl::to_hf_layout(grads)) {
      const double err = norm_relative(grad, ref.load("grad." + name));
      if (err > worst_grad) worst_grad = err, worst_name = name;
    }
    ok &= worst_grad <= bounds.grads;
    std::snprintf(grads_text, sizeof(grads_text), "grads worst %.2e (<= %.0e, %s)", worst_grad, bounds.grads,
                  worst_name.c_str());
  }
  std::printf("%-7s %-26s %-5s attention=%-44s experts=%-11s logits %.2e (<= %.0e)  ce %.2e  aux %.2e  %s  %s\n",
              dir.substr(dir.find_last_of('/') + 1).c_str(), batch_file.c_str(), dtype == torch::kFloat32 ? "fp32" : "bf16",
              mdl::describe(model->layer_context(batch).documents).c_str(),
              model->config().is_moe() ? mdl::to_string(model->expert_backend()).c_str() : "-", logits_err,
              bounds.logits, ce_err, aux_err, grads_text, ok ? "OK" : "FAIL");
  return ok;
}

int run(int argc, char** argv) {
  const bool export_check = argc == 4 && std::string(argv[2]) == "--weights";
  if (argc != 2 && !export_check) {
    std::fprintf(stderr, "usage: %s CASE_DIR [--weights TOPOTRAIN_CHECKPOINT] (CASE_DIR written by "
                 "tests/hf/hf_parity.py)\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  if (export_check) {
    const auto checkpoint = topotrain::CheckpointReader::checkpoint_at(argv[3]);
    if (!checkpoint) {
      std::fprintf(stderr, "%s: %s is not a topotrain checkpoint or run directory\n", argv[0], argv[3]);
      return 2;
    }
    return compare(dir, *checkpoint, "reference.safetensors", device, torch::kFloat32, false, {1e-4, 0}) ? 0 : 1;
  }
  // reference.safetensors: documents of several lengths (flash varlen on a GPU);
  // reference-rows.safetensors (some cases): of one length (cuDNN on the packed batch as a grid).
  bool ok = true;
  for (const std::string batch : {"reference.safetensors", "reference-rows.safetensors"}) {
    if (batch != "reference.safetensors" && !topotrain::file_exists(dir + "/" + batch)) continue;
    ok &= compare(dir, "", batch, device, torch::kFloat32, false, {1e-4, 1e-4});
    if (device.is_cuda()) {
      ok &= compare(dir, "", batch, device, torch::kBFloat16, false, {2e-2, 5e-2});
      ok &= compare(dir, "", batch, device, torch::kBFloat16, true, {2e-2, 5e-2});
    }
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
}
