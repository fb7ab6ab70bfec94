// Shape of a decoder-only model of one of the HF families topotrain builds (Qwen3 dense and
// MoE, Llama 3.x, Qwen2/2.5), with the field names of HF's config.json so that a checkpoint
// directory's config.json loads as is. The families differ in a few switches of one decoder
// (q/k norms, q/k/v biases, RoPE scaling); a key that changes the maths in a way topotrain
// does not implement is refused by name, never ignored. What a shape costs (parameters,
// FLOPs, training memory) is model_cost.h's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace topotrain::model {

// The families of HF's config.json model_type: "qwen3" and "qwen3_moe" (Qwen3), "llama"
// (Llama 3.x) and "qwen2" (Qwen2 and Qwen2.5).
enum class ModelFamily { qwen3, llama, qwen2 };

// The family a config.json's model_type names; none for a model_type topotrain does not build
// (and for none given: ModelConfig reads that as qwen3, what a drafter's check does not).
std::optional<ModelFamily> family_of_model_type(const std::string& model_type);
// "Qwen3", "Llama", "Qwen2".
std::string to_string(ModelFamily family);

// Llama 3's RoPE frequency scaling (rope_type "llama3"): wavelengths longer than
// original_max_position_embeddings / low_freq_factor are stretched by `factor`, those shorter
// than original_max_position_embeddings / high_freq_factor are kept, and those between are
// blended (HF's _compute_llama3_parameters).
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  // Where this config came from ("preset tiny-moe", "/path/config.json"): error messages
  // name it so that the user knows which file or setting to fix.
  std::string source = "default";

  ModelFamily family = ModelFamily::qwen3;
  // The family's switches: Qwen3 norms each head's q and k (q_norm, k_norm) before RoPE;
  // Qwen2 adds a bias to the q, k and v projections (never to o_proj).
  bool qk_norm() const { return family == ModelFamily::qwen3; }
  bool qkv_bias() const { return family == ModelFamily::qwen2; }
  // config.json's model_type and architectures entry: "qwen3_moe" / Qwen3MoeForCausalLM for
  // a MoE model, else the family's ("llama" / LlamaForCausalLM, ...).
  std::string model_type() const;
  std::string architecture() const;
  // For people: "Qwen3 dense", "Qwen3-MoE", "Llama", "Qwen2".
  std::string family_name() const;

  int64_t vocab_size = 151936;
  int64_t hidden_size = 1024;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 28;
  int64_t num_attention_heads = 16;
  int64_t num_key_value_heads = 8;
  int64_t head_dim = 128;
  double rope_theta = 1000000.0;
  std::optional<Llama3RopeScaling> rope_scaling;  // none: plain RoPE (rope_type "default")
  // "rope_theta 500000, llama3 scaling (factor 8, ...)": for messages.
  std::string rope_text() const;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 40960;
  double initializer_range = 0.02;
  // Every *_token_id key of config.json with a value (bos_token_id, eos_token_id: one id or a
  // list, pad_token_id, ...), kept so that configs written from this one (exports, a
  // drafter's) carry them and a decoder knows where to stop; none in presets. They do not
  // change what the weights compute, so same_model ignores them.
  std::map<std::string, std::vector<int64_t>> token_ids;
  // token_ids' eos_token_id: the ids a decoder stops at (empty when the config names none).
  std::vector<int64_t> eos_token_ids() const;

  // Mixture of experts; num_experts == 0 means a dense model.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = true;
  double router_aux_loss_coef = 0.001;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;

  bool is_moe() const { return num_experts > 0; }
  // HF's rule: a layer is sparse unless listed in mlp_only_layers, and only every
  // decoder_sparse_step-th layer (1-based) is.
  bool is_moe_layer(int64_t layer) const;
  int64_t num_moe_layers() const;

  // Throws ConfigError naming `source` and the offending field.
  void validate() const;

  // HF config.json (model_type qwen3, qwen3_moe, llama or qwen2; none read as qwen3). What
  // would change the maths and is not implemented is refused naming the key: other rope
  // types, sliding windows switched on, biases other than Qwen2's q/k/v (attention_bias,
  // mlp_bias), dropout, activations other than silu, quantized weights. So is a DFlash
  // drafter's config (it has dflash_config; model/dflash_hf.h reads those): its Qwen3 keys
  // describe the draft layers, not a model to build.
  static ModelConfig from_json_file(const std::string& path);
  static ModelConfig from_json_text(const std::string& text, const std::string& source);
  // An HF-loadable config.json (architecture()) for weights stored
  // in `dtype`, named as HF names it ("float32", "bfloat16"). from_json_text reads it back
  // to an equal config (all but `source`).
  std::string to_json_text(const std::string& dtype = "float32") const;

  // Every field but `source`, the token ids and initializer_range (which only random
  // initialisation reads) equal: the same weights compute the same function.
  bool same_model(const ModelConfig& other) const;
  // The fields same_model compares that differ, as "hidden_size 64 vs 1024" (this, other)
  // joined by ", " (MoE against dense: model_type, not every expert key); "" when same_model.
  std::string differences(const ModelConfig& other) const;

  // moe-500m, qwen3-0.6b, qwen3-8b, tiny-dense, tiny-moe.
  static ModelConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
};

}  // namespace topotrain::model
