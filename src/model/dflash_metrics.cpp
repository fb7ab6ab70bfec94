#include "topotrain/model/dflash_metrics.h"

#include <stdexcept>

#include "topotrain/core/error.h"

namespace topotrain::model {

std::vector<double> slot_accuracy(const std::vector<int64_t>& correct, const std::vector<int64_t>& valid) {
  if (correct.size() != valid.size() || correct.size() < 2) {
    throw std::invalid_argument(cat("slot_accuracy: expected two per-slot count vectors of one size >= 2, got ",
                                    correct.size(), " and ", valid.size()));
  }
  std::vector<double> accuracy;
  for (size_t k = 1; k < correct.size(); ++k) {
    accuracy.push_back(valid[k] > 0 ? static_cast<double>(correct[k]) / static_cast<double>(valid[k]) : 0.0);
  }
  return accuracy;
}

double acceptance_length(const std::vector<double>& accuracy) {
  double tau = 1, prefix = 1;
  for (double acc : accuracy) {
    prefix *= acc;
    tau += prefix;
  }
  return tau;
}

TrivialDrafterCounts::TrivialDrafterCounts(int64_t block_size, int64_t vocab_size)
    : block_size_(block_size), vocab_size_(vocab_size) {
  if (block_size < 2 || vocab_size < 1)
    throw std::invalid_argument(cat("TrivialDrafterCounts: block size ", block_size, " and vocabulary ", vocab_size,
                                    " (need >= 2 and >= 1)"));
}

void TrivialDrafterCounts::add(const torch::Tensor& slots, const torch::Tensor& labels) {
  if (slots.numel() == 0) return;
  if (!counts_.defined())
    counts_ = torch::zeros({block_size_ * vocab_size_}, torch::TensorOptions().dtype(torch::kInt64).device(labels.device()));
  counts_.index_add_(0, slots * vocab_size_ + labels, torch::ones_like(labels));
}

torch::Tensor TrivialDrafterCounts::correct() const {
  if (!counts_.defined()) return torch::zeros({2 * block_size_}, torch::kInt64);
  const torch::Tensor per_slot = counts_.view({block_size_, vocab_size_});
  const torch::Tensor mode = per_slot.sum(0).argmax();
  return torch::cat({per_slot.index_select(1, mode.reshape({1})).reshape({block_size_}),
                     std::get<0>(per_slot.max(1))});
}

double dflash_step_flops(const DFlashConfig& config, const DFlashBlocks& blocks, int64_t tokens) {
  const ModelConfig c = config.layer_config();
  const double h = static_cast<double>(c.hidden_size), q = static_cast<double>(c.num_attention_heads * c.head_dim);
  const double kv = static_cast<double>(c.num_key_value_heads * c.head_dim), layers = static_cast<double>(c.num_hidden_layers);
  const double slots = static_cast<double>(blocks.num_blocks() * config.block_size), t = static_cast<double>(tokens);
  const double taps = static_cast<double>(config.resolved_taps().size());
  const double block_layer = h * (2 * q + 2 * kv) + 3 * h * static_cast<double>(c.intermediate_size);
  double keys = 0;  // sum over query slots of the keys each one attends to
  for (int64_t v : blocks.visible_context) keys += static_cast<double>(config.block_size * (v + config.block_size));
  return 6 * slots * block_layer * layers               // block projections and MLPs
         + 4 * t * taps * h * h                          // fc (the taps need no gradient)
         + 6 * t * 2 * h * kv * layers                   // context k/v projections
         + 3 * 4 * keys * q * layers                     // QK^T and PV
         + 4 * static_cast<double>(blocks.num_valid_slots()) * h * static_cast<double>(c.vocab_size);  // frozen lm_head
}

}  // namespace topotrain::model
