#include "topotrain/model/config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "topotrain/core/error.h"

namespace topotrain::model {
namespace {

using nlohmann::json;

template <typename T>
void read_field(const json& doc, const char* key, T& out, const std::string& source) {
  auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return;
  try {
    out = it->get<T>();
  } catch (const json::exception&) {
    throw ConfigError(cat(source, ": field '", key, "' has the wrong type (", it->dump(), ")"));
  }
}

// A token-id key of HF's config.json: absent or null, one id, or a list of ids.
std::vector<int64_t> token_id_values(const json& doc, const char* key, const std::string& source) {
  std::vector<int64_t> ids;
  const auto it = doc.find(key);
  if (it != doc.end() && it->is_array()) {
    read_field(doc, key, ids, source);
  } else if (it != doc.end() && !it->is_null()) {
    ids.emplace_back();
    read_field(doc, key, ids.back(), source);
  }
  return ids;
}

void refuse_if(bool unsupported, const std::string& source, const std::string& what) {
  if (unsupported) {
    throw ConfigError(cat(source, ": ", what, " changes the model in a way topotrain does not implement; "
                          "topotrain builds Qwen3, Qwen3-MoE, Llama 3.x and Qwen2/2.5 as HF's defaults have them"));
  }
}

ModelFamily family_of(const std::string& model_type, const std::string& source) {
  if (model_type.empty()) return ModelFamily::qwen3;
  if (const auto family = family_of_model_type(model_type)) return *family;
  throw ConfigError(cat(source, ": model_type '", model_type,
                        "' is not a family topotrain builds (qwen3, qwen3_moe, llama, qwen2)"));
}

// rope_parameters (transformers 5) or rope_scaling (earlier releases): rope_theta where the
// object holds it, and Llama 3's scaling; any other rope_type is refused.
void read_rope(const json& doc, const char* key, ModelConfig& c, const std::string& source) {
  const auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return;
  if (!it->is_object()) throw ConfigError(cat(source, ": field '", key, "' must be an object, got ", it->dump()));
  const std::string rope_type = it->value("rope_type", it->value("type", std::string("default")));
  const std::string where = cat(source, " ", key);
  read_field(*it, "rope_theta", c.rope_theta, source);
  double partial = 1.0;
  read_field(*it, "partial_rotary_factor", partial, where);
  refuse_if(partial != 1.0, source, cat(key, ".partial_rotary_factor = ", partial));
  if (rope_type == "default") return;
  refuse_if(rope_type != "llama3", source, cat(key, ".rope_type = '", rope_type, "' (default and llama3 are built)"));
  Llama3RopeScaling scaling;
  for (const char* required : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    if (!it->contains(required))
      throw ConfigError(cat(source, ": ", key, " of rope_type llama3 lacks '", required, "'"));
  }
  read_field(*it, "factor", scaling.factor, where);
  read_field(*it, "low_freq_factor", scaling.low_freq_factor, where);
  read_field(*it, "high_freq_factor", scaling.high_freq_factor, where);
  read_field(*it, "original_max_position_embeddings", scaling.original_max_position_embeddings, where);
  c.rope_scaling = scaling;
}

// What config.json calls a family's models.
struct FamilyNames {
  const char *model_type, *architecture;
};

FamilyNames names_of(ModelFamily family, bool moe) {
  switch (family) {
    case ModelFamily::llama:
      return {"llama", "LlamaForCausalLM"};
    case ModelFamily::qwen2:
      return {"qwen2", "Qwen2ForCausalLM"};
    case ModelFamily::qwen3:
      break;
  }
  return moe ? FamilyNames{"qwen3_moe", "Qwen3MoeForCausalLM"} : FamilyNames{"qwen3", "Qwen3ForCausalLM"};
}

}  // namespace

std::optional<ModelFamily> family_of_model_type(const std::string& model_type) {
  if (model_type == "qwen3" || model_type == "qwen3_moe") return ModelFamily::qwen3;
  if (model_type == "llama") return ModelFamily::llama;
  if (model_type == "qwen2") return ModelFamily::qwen2;
  return std::nullopt;
}

std::string ModelConfig::model_type() const { return names_of(family, is_moe()).model_type; }
std::string ModelConfig::architecture() const { return names_of(family, is_moe()).architecture; }
std::string ModelConfig::family_name() const {
  if (family != ModelFamily::qwen3) return to_string(family);
  return is_moe() ? "Qwen3-MoE" : "Qwen3 dense";
}

std::string to_string(ModelFamily family) {
  switch (family) {
    case ModelFamily::llama:
      return "Llama";
    case ModelFamily::qwen2:
      return "Qwen2";
    case ModelFamily::qwen3:
      break;
  }
  return "Qwen3";
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (!is_moe()) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

int64_t ModelConfig::num_moe_layers() const {
  int64_t n = 0;
  for (int64_t layer = 0; layer < num_hidden_layers; ++layer) n += is_moe_layer(layer) ? 1 : 0;
  return n;
}

void ModelConfig::validate() const {
  auto positive = [&](int64_t value, const char* key) {
    if (value <= 0) throw ConfigError(cat(source, ": ", key, " must be positive, got ", value));
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  if (head_dim % 2 != 0) throw ConfigError(cat(source, ": head_dim must be even for rotary embeddings, got ", head_dim));
  if (num_attention_heads % num_key_value_heads != 0) {
    throw ConfigError(cat(source, ": num_attention_heads (", num_attention_heads,
                          ") must be a multiple of num_key_value_heads (", num_key_value_heads, ")"));
  }
  if (rope_theta <= 0 || rms_norm_eps <= 0) {
    throw ConfigError(cat(source, ": rope_theta and rms_norm_eps must be positive"));
  }
  if (num_experts < 0) throw ConfigError(cat(source, ": num_experts must be >= 0, got ", num_experts));
  if (num_experts > 0 && family != ModelFamily::qwen3)
    throw ConfigError(cat(source, ": a ", model_type(), " model has no experts (num_experts ", num_experts,
                          "); mixtures of experts are Qwen3-MoE's"));
  if (rope_scaling) {
    const auto& s = *rope_scaling;
    if (!(s.factor >= 1) || !(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor) ||
        s.original_max_position_embeddings <= 0) {
      throw ConfigError(cat(source, ": llama3 rope scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor "
                            "and original_max_position_embeddings > 0, got factor ", s.factor, ", low_freq_factor ",
                            s.low_freq_factor, ", high_freq_factor ", s.high_freq_factor,
                            ", original_max_position_embeddings ", s.original_max_position_embeddings));
    }
  }
  bool any_dense_layer = false;
  for (int64_t layer = 0; layer < num_hidden_layers; ++layer) any_dense_layer |= !is_moe_layer(layer);
  if (any_dense_layer) positive(intermediate_size, "intermediate_size");
  if (is_moe()) {
    positive(moe_intermediate_size, "moe_intermediate_size");
    positive(decoder_sparse_step, "decoder_sparse_step");
    if (num_experts_per_tok <= 0 || num_experts_per_tok > num_experts) {
      throw ConfigError(cat(source, ": num_experts_per_tok must be in [1, num_experts = ", num_experts, "], got ",
                            num_experts_per_tok));
    }
    for (int64_t layer : mlp_only_layers) {
      if (layer < 0 || layer >= num_hidden_layers) {
        throw ConfigError(cat(source, ": mlp_only_layers lists layer ", layer, " but the model has ",
                              num_hidden_layers, " layers"));
      }
    }
  }
}

ModelConfig ModelConfig::from_json_text(const std::string& text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ConfigError(cat(source, ": not valid JSON (", e.what(), ")"));
  }
  if (!doc.is_object()) throw ConfigError(cat(source, ": expected a JSON object"));
  if (doc.contains("dflash_config"))
    throw ConfigError(cat(source, " is the config of a DFlash drafter (it has dflash_config), not of a Qwen3 model: "
                          "name the drafter's folder where a drafter is asked for (dflash_train's "
                          "model.draft_weights) and its target's config or weights where the model is"));
  std::string model_type;
  read_field(doc, "model_type", model_type, source);

  ModelConfig c;
  c.source = source;
  c.family = family_of(model_type, source);
  // HF's defaults where config.json leaves a key out and the family's differ from Qwen3's.
  if (c.family != ModelFamily::qwen3) c.rope_theta = 10000.0;
  read_field(doc, "vocab_size", c.vocab_size, source);
  read_field(doc, "hidden_size", c.hidden_size, source);
  read_field(doc, "intermediate_size", c.intermediate_size, source);
  read_field(doc, "num_hidden_layers", c.num_hidden_layers, source);
  read_field(doc, "num_attention_heads", c.num_attention_heads, source);
  c.num_key_value_heads = c.num_attention_heads;
  read_field(doc, "num_key_value_heads", c.num_key_value_heads, source);
  c.head_dim = 0;
  read_field(doc, "head_dim", c.head_dim, source);
  if (c.head_dim == 0 && c.num_attention_heads > 0) c.head_dim = c.hidden_size / c.num_attention_heads;
  read_field(doc, "rope_theta", c.rope_theta, source);
  read_field(doc, "rms_norm_eps", c.rms_norm_eps, source);
  read_field(doc, "tie_word_embeddings", c.tie_word_embeddings, source);
  read_field(doc, "max_position_embeddings", c.max_position_embeddings, source);
  read_field(doc, "initializer_range", c.initializer_range, source);
  for (const auto& [key, value] : doc.items()) {
    const std::string suffix = "_token_id";
    if (key.size() <= suffix.size() || key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    if (auto ids = token_id_values(doc, key.c_str(), source); !ids.empty()) c.token_ids[key] = std::move(ids);
  }
  // HF's LlamaConfig gives a config.json without them bos 1 and eos 2 (a null stays none), and
  // generate stops there: so does a decoder of this config.
  if (c.family == ModelFamily::llama) {
    if (!doc.contains("bos_token_id")) c.token_ids["bos_token_id"] = {1};
    if (!doc.contains("eos_token_id")) c.token_ids["eos_token_id"] = {2};
  }
  if (c.family == ModelFamily::qwen3 &&
      (model_type == "qwen3_moe" || doc.contains("num_experts") || doc.contains("num_local_experts"))) {
    // transformers 5 maps num_experts onto num_local_experts and saves it under that name.
    read_field(doc, "num_local_experts", c.num_experts, source);
    read_field(doc, "num_experts", c.num_experts, source);
    read_field(doc, "num_experts_per_tok", c.num_experts_per_tok, source);
    read_field(doc, "moe_intermediate_size", c.moe_intermediate_size, source);
    read_field(doc, "norm_topk_prob", c.norm_topk_prob, source);
    read_field(doc, "router_aux_loss_coef", c.router_aux_loss_coef, source);
    read_field(doc, "decoder_sparse_step", c.decoder_sparse_step, source);
    read_field(doc, "mlp_only_layers", c.mlp_only_layers, source);
  }

  // Newer transformers releases nest the RoPE settings under rope_parameters.
  for (const char* key : {"rope_scaling", "rope_parameters"}) read_rope(doc, key, c, source);
  std::string act = "silu";
  read_field(doc, "hidden_act", act, source);
  refuse_if(act != "silu", source, cat("hidden_act = '", act, "'"));
  // Qwen2's q/k/v biases are its architecture's, not a key; attention_bias (Llama's and
  // Qwen3's) would put one on o_proj too.
  for (const char* key : {"attention_bias", "mlp_bias", "use_sliding_window"}) {
    bool flag = false;
    read_field(doc, key, flag, source);
    refuse_if(flag, source, cat(key, " = true"));
  }
  if (doc.contains("layer_types") && doc.at("layer_types").is_array()) {
    for (const auto& type : doc.at("layer_types")) {
      refuse_if(type != "full_attention", source, cat("layer_types entry ", type.dump()));
    }
  }
  double dropout = 0.0;
  read_field(doc, "attention_dropout", dropout, source);
  refuse_if(dropout != 0.0, source, cat("attention_dropout = ", dropout));
  refuse_if(doc.contains("quantization_config"), source, "quantization_config (quantized weights)");
  c.validate();
  return c;
}

ModelConfig ModelConfig::from_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(cat("cannot open model config '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  return from_json_text(text.str(), path);
}

std::string ModelConfig::to_json_text(const std::string& dtype) const {
  // rope_theta appears twice: transformers 5 reads rope_parameters, earlier releases (and
  // the legacy path of 5) the top-level key; Llama 3's scaling likewise in rope_parameters
  // and rope_scaling, and dtype under its name of each era.
  // transformers_version: transformers 5 takes a local folder whose config.json names no
  // version for a Mistral tokenizer from before its regex fix and warns that the folder's
  // tokenizer is wrong (TokenizersBackend's mistral regex patch); 4.51.0, the first release
  // with Qwen3 and Qwen3-MoE, is what Qwen's own config.json files name.
  json rope = {{"rope_type", "default"}, {"rope_theta", rope_theta}};
  json scaling = nullptr;
  if (rope_scaling) {
    scaling = {{"rope_type", "llama3"},
               {"factor", rope_scaling->factor},
               {"low_freq_factor", rope_scaling->low_freq_factor},
               {"high_freq_factor", rope_scaling->high_freq_factor},
               {"original_max_position_embeddings", rope_scaling->original_max_position_embeddings}};
    rope.update(scaling);
  }
  json doc = {
      {"transformers_version", "4.51.0"},
      {"model_type", model_type()},
      {"architectures", {architecture()}},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"rope_theta", rope_theta},
      {"rope_parameters", rope},
      {"rope_scaling", scaling},
      {"rms_norm_eps", rms_norm_eps},
      {"tie_word_embeddings", tie_word_embeddings},
      {"max_position_embeddings", max_position_embeddings},
      {"initializer_range", initializer_range},
      {"hidden_act", "silu"},
      {"attention_dropout", 0.0},
      {"dtype", dtype},
      {"torch_dtype", dtype},
  };
  // Each family's own keys for what topotrain builds; Qwen2 has no attention_bias key (its
  // q/k/v biases are fixed) and Llama no sliding window.
  if (family != ModelFamily::qwen2) doc["attention_bias"] = false;
  if (family == ModelFamily::llama) doc["mlp_bias"] = false;
  if (family != ModelFamily::llama) doc["use_sliding_window"] = false;
  for (const auto& [key, ids] : token_ids) {
    if (ids.size() == 1) doc[key] = ids[0];
    else doc[key] = ids;
  }
  if (is_moe()) {
    doc["num_experts"] = num_experts;
    doc["num_experts_per_tok"] = num_experts_per_tok;
    doc["moe_intermediate_size"] = moe_intermediate_size;
    doc["norm_topk_prob"] = norm_topk_prob;
    doc["router_aux_loss_coef"] = router_aux_loss_coef;
    doc["decoder_sparse_step"] = decoder_sparse_step;
    doc["mlp_only_layers"] = mlp_only_layers;
  }
  return doc.dump(2);
}

std::string ModelConfig::rope_text() const {
  std::string text = cat("rope_theta ", rope_theta);
  if (!rope_scaling) return text;
  const auto& r = *rope_scaling;
  return cat(text, ", llama3 scaling (factor ", r.factor, ", low_freq_factor ", r.low_freq_factor, ", high_freq_factor ",
             r.high_freq_factor, ", original_max_position_embeddings ", r.original_max_position_embeddings, ")");
}

std::vector<int64_t> ModelConfig::eos_token_ids() const {
  const auto it = token_ids.find("eos_token_id");
  return it == token_ids.end() ? std::vector<int64_t>{} : it->second;
}

namespace {

// What same_model compares, as config.json's fields.
json weights_fields(ModelConfig c) {
  c.token_ids.clear();
  c.initializer_range = 0;
  return json::parse(c.to_json_text());
}

}  // namespace

bool ModelConfig::same_model(const ModelConfig& other) const { return weights_fields(*this) == weights_fields(other); }

std::string ModelConfig::differences(const ModelConfig& other) const {
  // A MoE model against a dense one differs in model_type; the expert keys only one side has
  // (and architectures, which follows model_type) would repeat that.
  const json mine = weights_fields(*this), theirs = weights_fields(other);
  std::string text;
  for (const auto& [key, value] : mine.items()) {
    const auto it = theirs.find(key);
    if (key == "architectures" || it == theirs.end() || *it == value) continue;
    text += cat(text.empty() ? "" : ", ", key, " ", value.dump(), " vs ", it->dump());
  }
  return text;
}

std::vector<std::string> ModelConfig::preset_names() {
  return {"moe-500m", "qwen3-0.6b", "qwen3-8b", "tiny-dense", "tiny-moe"};
}

ModelConfig ModelConfig::preset(const std::string& name) {
  ModelConfig c;
  c.source = cat("model preset '", name, "'");
  if (name == "qwen3-0.6b") {
    c.hidden_size = 1024, c.intermediate_size = 3072, c.num_hidden_layers = 28;
    c.num_attention_heads = 16, c.num_key_value_heads = 8, c.head_dim = 128;
    c.tie_word_embeddings = true;
  } else if (name == "qwen3-8b") {
    c.hidden_size = 4096, c.intermediate_size = 12288, c.num_hidden_layers = 36;
    c.num_attention_heads = 32, c.num_key_value_heads = 8, c.head_dim = 128;
  } else if (name == "moe-500m") {
    // 497.7M total / 327.9M active: few, wide experts keep the grouped GEMMs large
    // enough to run near peak on one GPU.
    c.hidden_size = 768, c.intermediate_size = 2048, c.num_hidden_layers = 16;
    c.num_attention_heads = 8, c.num_key_value_heads = 4, c.head_dim = 128;
    c.num_experts = 8, c.num_experts_per_tok = 2, c.moe_intermediate_size = 768;
  } else if (name == "tiny-dense" || name == "tiny-moe") {
    // Byte-level demo vocabulary: 256 bytes + specials fit in 512.
    c.vocab_size = 512, c.hidden_size = 64, c.intermediate_size = 128, c.num_hidden_layers = 3;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16;
    c.max_position_embeddings = 4096;
    c.tie_word_embeddings = name == "tiny-dense";
    if (name == "tiny-moe") {
      c.num_experts = 8, c.num_experts_per_tok = 2, c.moe_intermediate_size = 32;
      c.mlp_only_layers = {1};
    }
  } else {
    std::string known;
    for (const auto& p : preset_names()) known += (known.empty() ? "" : ", ") + p;
    throw ConfigError(cat("unknown model preset '", name, "' (known: ", known, ")"));
  }
  c.validate();
  return c;
}

}  // namespace topotrain::model
