#include "topotrain/model/model_cost.h"

#include <sstream>

namespace topotrain::model {
namespace {

double round_gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

ParameterCounts count_parameters(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  const int64_t q_width = c.num_attention_heads * c.head_dim, kv_width = c.num_key_value_heads * c.head_dim;
  const int64_t attention = h * q_width * 2 + h * kv_width * 2 + (c.qk_norm() ? 2 * c.head_dim : 0) +
                            (c.qkv_bias() ? q_width + 2 * kv_width : 0) + 2 * h /* layer norms */;
  ParameterCounts n;
  n.embedding = c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2);
  n.total = n.active = n.embedding + h /* final norm */;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    n.total += attention, n.active += attention;
    if (c.is_moe_layer(layer)) {
      const int64_t expert = 3 * h * c.moe_intermediate_size;
      n.total += c.num_experts * h + c.num_experts * expert;
      n.active += c.num_experts * h + c.num_experts_per_tok * expert;
    } else {
      n.total += 3 * h * c.intermediate_size;
      n.active += 3 * h * c.intermediate_size;
    }
  }
  return n;
}

double backbone_forward_flops_per_token(const ModelConfig& config, double mean_document_tokens) {
  const auto counts = count_parameters(config);
  const double attention = 4.0 * static_cast<double>(config.num_hidden_layers) *
                           static_cast<double>(config.num_attention_heads * config.head_dim) *
                           (mean_document_tokens / 2.0);
  return 2.0 * static_cast<double>(counts.active - counts.embedding) + attention;
}

double forward_flops_per_token(const ModelConfig& config, double mean_document_tokens) {
  const double lm_head = static_cast<double>(config.vocab_size) * static_cast<double>(config.hidden_size);
  return backbone_forward_flops_per_token(config, mean_document_tokens) + 2.0 * lm_head;
}

TrainingMemory estimate_training_memory(const ModelConfig& config) {
  const int64_t params = count_parameters(config).total;
  TrainingMemory m;
  m.master_weights = params * 4;
  m.gradients = params * 4;
  m.adam_moments = params * 8;
  m.bf16_weight_copies = params * 2;
  return m;
}

std::string describe(const ModelConfig& config) {
  const ParameterCounts n = count_parameters(config);
  const TrainingMemory m = estimate_training_memory(config);
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << config.source << ": " << config.family_name() << ", "
      << config.num_hidden_layers << " layers, hidden " << config.hidden_size << ", "
      << static_cast<double>(n.total) / 1e6 << "M parameters (" << static_cast<double>(n.active) / 1e6
      << "M active per token); training state " << round_gib(m.total()) << " GiB (fp32 master "
      << round_gib(m.master_weights) << " + fp32 grads " << round_gib(m.gradients) << " + fp32 Adam "
      << round_gib(m.adam_moments) << " + bf16 weight copies " << round_gib(m.bf16_weight_copies)
      << ") before activations";
  return out.str();
}

}  // namespace topotrain::model
