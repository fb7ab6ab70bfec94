// The drafter's logits on given inputs, for a check against an independent implementation
// of the exported format (tests/hf/dflash_export_parity.py, run by the hf test
// hf_dflash_export_logits and bench/dflash/speculate.sh): the target and the drafter are
// loaded as every tool loads them (train/trained_models.h), the target runs the tokens as
// one document (positions 0..T-1) and hands its tap layers to the drafter, which drafts a
// block at each anchor through forward_blocks, the training path. The blocks' hidden states
// go through the drafter's final norm (the exported norm.weight) and the target's lm_head.
//
//   drafter_logits TARGET DRAFTER IN.json OUT.safetensors [--device D] [--dtype fp32|bf16]
//
// IN.json: {"tokens": [ids...], "anchors": [rows...]}, every anchor a row with a token after
// it (0 <= anchor <= T - 2). OUT.safetensors, fp32: taps [T, taps * hidden] (the target's
// tap layers, concatenated in tap order) and logits [anchors, B, vocab] (every slot of every
// block, slot 0 included). The device defaults to cuda where present; the dtype to fp32.
// Exit status: 0 written, 2 bad input (named, with the fix), 1 any other failure.
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "topotrain/core/error.h"
#include "topotrain/model/dflash_anchors.h"
#include "topotrain/model/dflash_drafter.h"
#include "topotrain/model/rms_norm.h"
#include "topotrain/model/safetensors.h"
#include "topotrain/train/trained_models.h"

namespace mdl = topotrain::model;
using topotrain::cat;
using topotrain::ConfigError;

namespace {

constexpr const char* kUsage =
    "usage: drafter_logits TARGET DRAFTER IN.json OUT.safetensors [--device cpu|cuda|cuda:N] [--dtype fp32|bf16]\n";

struct Arguments {
  std::string target, drafter, input, output;
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  torch::ScalarType dtype = torch::kFloat32;
};

torch::Device parse_device(const std::string& text) {
  try {
    const torch::Device device(text);
    const auto gpus = static_cast<int>(torch::cuda::device_count());
    if (device.is_cpu() || (device.is_cuda() && gpus > 0 && device.index() < gpus)) return device;
  } catch (const c10::Error&) {
  }
  throw ConfigError(cat("--device ", text, ": use cpu, or cuda / cuda:N on a machine with a GPU"));
}

Arguments parse_arguments(int argc, char** argv) {
  Arguments a;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--device" || arg == "--dtype") && i + 1 < argc) {
      const std::string value = argv[++i];
      if (arg == "--device") {
        a.device = parse_device(value);
      } else if (value == "fp32" || value == "bf16") {
        a.dtype = value == "fp32" ? torch::kFloat32 : torch::kBFloat16;
      } else {
        throw ConfigError(cat("--dtype ", value, ": use fp32 or bf16"));
      }
    } else if (arg.rfind("--", 0) == 0) {
      throw ConfigError(cat("unknown option or missing value: ", arg));
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 4) throw ConfigError(cat("expected 4 paths, got ", positional.size()));
  a.target = positional[0], a.drafter = positional[1], a.input = positional[2], a.output = positional[3];
  return a;
}

struct Inputs {
  std::vector<int64_t> tokens, anchors;
};

// The integer list `key` of IN.json, each entry in [low, high].
std::vector<int64_t> id_list(const nlohmann::json& doc, const std::string& key, int64_t low, int64_t high,
                             const std::string& path, const std::string& meaning) {
  if (!doc.contains(key) || !doc[key].is_array() || doc[key].empty())
    throw ConfigError(cat(path, ": \"", key, "\" must be a non-empty list of ", meaning));
  std::vector<int64_t> values;
  for (const auto& v : doc[key]) {
    if (!v.is_number_integer() || v.get<int64_t>() < low || v.get<int64_t>() > high)
      throw ConfigError(cat(path, ": \"", key, "\" holds ", v.dump(), ": every entry must be ", meaning, " in [", low,
                            ", ", high, "]"));
    values.push_back(v.get<int64_t>());
  }
  return values;
}

Inputs read_inputs(const std::string& path, int64_t vocab_size) {
  std::ifstream in(path);
  if (!in) throw ConfigError(cat(path, ": cannot read; pass a JSON file {\"tokens\": [...], \"anchors\": [...]}"));
  nlohmann::json doc;
  try {
    in >> doc;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(cat(path, ": not JSON (", e.what(), ")"));
  }
  Inputs inputs;
  inputs.tokens = id_list(doc, "tokens", 0, vocab_size - 1, path, "token ids of the target's vocabulary");
  const auto t = static_cast<int64_t>(inputs.tokens.size());
  if (t < 2) throw ConfigError(cat(path, ": \"tokens\" needs at least 2 ids, so that an anchor has a token after it"));
  inputs.anchors = id_list(doc, "anchors", 0, t - 2, path, "rows of \"tokens\" with a token after them");
  for (size_t i = 1; i < inputs.anchors.size(); ++i)
    if (inputs.anchors[i] <= inputs.anchors[i - 1])
      throw ConfigError(cat(path, ": \"anchors\" must be strictly increasing"));
  return inputs;
}

void run(const Arguments& args) {
  torch::NoGradGuard no_grad;
  mdl::CausalLM target = topotrain::load_target_model(args.target);
  mdl::DFlashDrafter drafter = topotrain::load_drafter_model(args.drafter, *target);
  const Inputs inputs = read_inputs(args.input, target->config().vocab_size);
  target->to(args.device);
  target->set_compute_dtype(args.dtype);
  drafter->to(args.device);
  drafter->set_compute_dtype(args.dtype);

  const topotrain::PackedBatch host = topotrain::PackedBatch::from_documents({inputs.tokens});
  const topotrain::PackedBatch batch = host.to(args.device);
  auto backbone = target->forward_backbone(batch, drafter->taps());
  const torch::Tensor taps = torch::cat(backbone.taps, 1);
  const int64_t block = drafter->config().block_size;
  const auto blocks = mdl::blocks_at(host.cu_seqlens, host.loss_mask, block, inputs.anchors);
  const torch::Tensor hidden = drafter->forward_blocks({batch, taps, {}}, blocks);
  const torch::Tensor normed = mdl::rms_norm(hidden, drafter->target_norm, drafter->config().target.rms_norm_eps);
  const torch::Tensor logits = torch::matmul(normed, drafter->target_lm_head.to(normed.scalar_type()).t());

  const auto anchors = static_cast<int64_t>(inputs.anchors.size());
  mdl::write_safetensors(args.output, {{"taps", taps.to(torch::kCPU, torch::kFloat32)},
                                       {"logits", logits.to(torch::kCPU, torch::kFloat32).view({anchors, block, -1})}});
  std::printf("drafter_logits: %lld tokens, taps [%s], %lld anchors of block %lld, %s on %s -> %s\n",
              static_cast<long long>(inputs.tokens.size()), mdl::taps_text(drafter->taps()).c_str(),
              static_cast<long long>(anchors), static_cast<long long>(block),
              args.dtype == torch::kFloat32 ? "fp32" : "bf16", args.device.str().c_str(), args.output.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(parse_arguments(argc, argv));
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "drafter_logits: error: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "drafter_logits: %s\n", e.what());
    return 1;
  }
}
