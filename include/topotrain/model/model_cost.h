// What a model of a given shape costs: its parameter counts, its FLOPs per token and the
// memory its training state takes. Arithmetic on the config alone, for the start-of-run line,
// the progress line's MFU and the timing log.
#pragma once

#include <cstdint>
#include <string>

#include "topotrain/model/config.h"

namespace topotrain::model {

struct ParameterCounts {
  int64_t total = 0;
  int64_t active = 0;     // touched by one token: shared weights + top-k experts per layer
  int64_t embedding = 0;  // embed_tokens (+ lm_head when untied)
};
ParameterCounts count_parameters(const ModelConfig& config);

// Model FLOPs of one token's forward pass (training costs 3x): 2 per active weight
// (lm_head included, the embedding lookup not) plus the attention score and value
// matmuls, 4 * layers * heads * head_dim * mean attended context, taken as
// mean_document_tokens / 2 (the causal mask). For documents of several lengths pass
// sum(len^2) / sum(len) (data::mean_attention_context), not the mean length.
double forward_flops_per_token(const ModelConfig& config, double mean_document_tokens);
// The same without the lm_head's 2 * vocab_size * hidden_size: the decoder layers and the
// final norm, all a frozen DFlash target runs (it sends hidden states, never logits).
double backbone_forward_flops_per_token(const ModelConfig& config, double mean_document_tokens);

// Bytes of training state that do not scale with the batch: fp32 master weights, fp32
// gradients, fp32 Adam moments, and the bf16 weight copies made during forward/backward.
struct TrainingMemory {
  int64_t master_weights = 0;
  int64_t gradients = 0;
  int64_t adam_moments = 0;
  int64_t bf16_weight_copies = 0;
  int64_t total() const { return master_weights + gradients + adam_moments + bf16_weight_copies; }
};
TrainingMemory estimate_training_memory(const ModelConfig& config);

// One line for the start-of-run log: parameters (total/active) and the memory estimate.
std::string describe(const ModelConfig& config);

}  // namespace topotrain::model
