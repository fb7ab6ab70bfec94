#include "topotrain/model/hf_checkpoint.h"

#include <fstream>
#include <set>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"

namespace topotrain::model {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_text(c10::IntArrayRef shape) { return cat(shape); }

}  // namespace

NamedTensors to_hf_layout(const NamedTensors& stacked) {
  const std::string gate_up = "experts.gate_up_proj", down = "experts.down_proj";
  NamedTensors views;
  for (const auto& [name, p] : stacked) {
    if (ends_with(name, gate_up)) {
      const std::string prefix = name.substr(0, name.size() - gate_up.size()) + "experts.";
      const int64_t intermediate = p.size(1) / 2;
      for (int64_t e = 0; e < p.size(0); ++e) {
        views.emplace_back(cat(prefix, e, ".gate_proj.weight"), p[e].narrow(0, 0, intermediate));
        views.emplace_back(cat(prefix, e, ".up_proj.weight"), p[e].narrow(0, intermediate, intermediate));
      }
    } else if (ends_with(name, down)) {
      const std::string prefix = name.substr(0, name.size() - down.size()) + "experts.";
      for (int64_t e = 0; e < p.size(0); ++e) views.emplace_back(cat(prefix, e, ".down_proj.weight"), p[e]);
    } else {
      views.emplace_back(name, p);
    }
  }
  return views;
}

NamedTensors hf_tensor_views(CausalLMImpl& model) {
  NamedTensors parameters;
  for (const auto& item : model.named_parameters()) parameters.emplace_back(item.key(), item.value());
  return to_hf_layout(parameters);
}

void load_hf_tensors(const std::string& path, const NamedTensors& views, const std::set<std::string>& ignored) {
  const SafetensorsCheckpoint checkpoint(path);
  std::set<std::string> expected;
  for (const auto& [name, view] : views) {
    expected.insert(name);
    if (!checkpoint.contains(name)) {
      throw ConfigError(cat("checkpoint '", path, "' is missing tensor '", name, "' (shape ", shape_text(view.sizes()),
                            "); was it saved for a different model config?"));
    }
    const SafetensorsEntry& entry = checkpoint.entry(name);
    const std::string& file = checkpoint.file_of(name);
    if (c10::IntArrayRef(entry.shape) != view.sizes()) {
      throw ConfigError(cat(file, ": tensor '", name, "' has shape ", shape_text(entry.shape), " but the model expects ",
                            shape_text(view.sizes()), "; check the model config against the checkpoint's config.json"));
    }
    if (entry.scalar_type != torch::kFloat32 && entry.scalar_type != torch::kBFloat16 &&
        entry.scalar_type != torch::kFloat16) {
      throw ConfigError(cat(file, ": tensor '", name, "' has dtype ", entry.dtype,
                            "; expected a weight dtype F32, BF16 or F16"));
    }
  }
  for (const auto& name : checkpoint.names()) {
    if (expected.count(name) == 0 && ignored.count(name) == 0) {
      throw ConfigError(cat(checkpoint.file_of(name), ": unexpected tensor '", name,
                            "' that the model has no parameter for; was it saved for a different model config?"));
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, view] : views) {
    auto source = checkpoint.load(name);
    view.copy_(source.to(view.device()));
  }
}

std::string hf_dtype_name(torch::ScalarType dtype) {
  if (dtype == torch::kFloat32) return "float32";
  if (dtype == torch::kBFloat16) return "bfloat16";
  throw std::invalid_argument(cat("HF export: dtype ", dtype, " is neither float32 nor bfloat16"));
}

std::vector<std::string> save_hf_tensors(const std::string& directory, const NamedTensors& views,
                                         const std::string& config_json, torch::ScalarType dtype,
                                         int64_t max_shard_bytes) {
  hf_dtype_name(dtype);  // refuses any other dtype before a file is written
  NamedTensors tensors;
  for (const auto& [name, view] : views) tensors.emplace_back(name, view.detach().to(torch::kCPU, dtype).contiguous());
  std::vector<std::string> written = write_safetensors_checkpoint(directory, tensors, max_shard_bytes);
  written.push_back(join_path(directory, "config.json"));
  std::ofstream out(written.back());
  out << config_json << "\n";
  if (!out) throw std::runtime_error(cat("cannot write ", written.back()));
  return written;
}

void load_hf_checkpoint(CausalLMImpl& model, const std::string& path) {
  // HF ties lm_head to the embedding the same way, so a tied model's file may hold it.
  std::set<std::string> ignored;
  if (model.config().tie_word_embeddings) ignored.insert("lm_head.weight");
  load_hf_tensors(path, hf_tensor_views(model), ignored);
}

std::vector<std::string> save_hf_checkpoint(CausalLMImpl& model, const std::string& directory,
                                            torch::ScalarType dtype, int64_t max_shard_bytes) {
  return save_hf_tensors(directory, hf_tensor_views(model), model.config().to_json_text(hf_dtype_name(dtype)), dtype,
                         max_shard_bytes);
}

}  // namespace topotrain::model
