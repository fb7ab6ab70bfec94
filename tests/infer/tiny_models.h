// Test helpers: a random tiny target (dense, or MoE with dense and sparse layers) with a random
// DFlash drafter for it, and the independent reference the decoders are checked against:
// greedy decoding without a cache, every token from a full forward_backbone of the sequence.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "topotrain/model/dflash_drafter.h"
#include "topotrain/model/causal_lm.h"
#include "../tiny_dflash_config.h"

namespace topotrain::test_support {

struct TinyPair {
  model::CausalLM target{nullptr};
  model::DFlashDrafter drafter{nullptr};
};

// tiny_dflash_config's target (8 dense layers, vocab 64, blocks of 4, taps {1, 5}); `moe`
// makes every other target layer sparse (4 experts, top 2).
inline TinyPair tiny_pair(bool moe = false, int64_t block_size = 4) {
  model::DFlashConfig c = tiny_dflash_config();
  c.block_size = block_size;
  if (moe) {
    c.target.num_experts = 4, c.target.num_experts_per_tok = 2, c.target.moe_intermediate_size = 16;
    c.target.decoder_sparse_step = 2;
  }
  TinyPair pair;
  pair.target = model::CausalLM(c.target);
  pair.drafter = model::DFlashDrafter(c);
  pair.drafter->load_target_tensors(*pair.target);
  return pair;
}

// Both models on `device`, computing in `dtype`.
inline void place(TinyPair& pair, const torch::Device& device, torch::ScalarType dtype) {
  pair.target->to(device);
  pair.target->set_compute_dtype(dtype);
  pair.drafter->to(device);
  pair.drafter->set_compute_dtype(dtype);
}

// `n` token ids drawn uniformly below `vocab` from torch's global generator.
inline std::vector<int64_t> random_tokens(int64_t n, int64_t vocab) {
  const auto t = torch::randint(vocab, {n}, torch::kInt64);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

// The next token after `sequence` by a full forward without any cache, on the target's device.
inline int64_t full_forward_next(model::CausalLMImpl& target, const std::vector<int64_t>& sequence) {
  const auto device = target.model->embed_tokens->weight.device();
  const auto out = target.forward_backbone(PackedBatch::from_documents({sequence}).to(device));
  const auto last = torch::tensor({static_cast<int64_t>(sequence.size()) - 1}, torch::kInt64).to(device);
  return target.logits_at(out.hidden, last).argmax(-1).item<int64_t>();
}

// `count` greedy tokens after `prompt`, each from a full forward of the sequence so far.
inline std::vector<int64_t> reference_greedy(model::CausalLMImpl& target, const std::vector<int64_t>& prompt,
                                             int64_t count) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> sequence = prompt, response;
  for (int64_t i = 0; i < count; ++i) {
    response.push_back(full_forward_next(target, sequence));
    sequence.push_back(response.back());
  }
  return response;
}

}  // namespace topotrain::test_support
