// A target of any family topotrain builds that decodes one sequence with a KV cache: each
// forward runs only the new tokens, at the positions after those already cached, and returns
// their final hidden states and the outputs of the tap layers a DFlash drafter reads.
//
// The forwards are the model's own (CausalLMImpl::forward_cached, the layer loop of
// forward_backbone over this target's KvCache): a forward of the whole sequence at once and any
// split of it into cached chunks agree up to rounding.
//
// Decoding needs no gradients: callers hold a torch::NoGradGuard.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "topotrain/model/causal_lm.h"
#include "topotrain/model/kv_cache.h"

namespace topotrain::infer {

struct TargetStep {
  torch::Tensor hidden;  // [n, hidden] after the final norm, compute dtype
  torch::Tensor taps;    // [n, taps * hidden]: the tap layers' outputs, concatenated in tap
                         // order; undefined without taps
};

class CachedTarget {
 public:
  // Taps are decoder layer indices as forward_backbone's. The model must outlive this; its
  // device and compute dtype are read at construction, so place and cast it first.
  CachedTarget(model::CausalLMImpl& model, std::vector<int64_t> taps);

  const model::CausalLMImpl& model() const { return model_; }
  const std::vector<int64_t>& taps() const { return taps_; }
  int64_t length() const { return cache_.length(); }

  // Runs `tokens` (int64 [n], n >= 1) at positions length()..length()+n-1 over the cache and
  // appends their keys and values to it.
  TargetStep forward(const torch::Tensor& tokens);
  // The greedy next token after each row of `hidden`: argmax of lm_head, int64 [n] on the device.
  torch::Tensor greedy_tokens(const torch::Tensor& hidden);
  // Forgets the positions from `length` on (a rejected speculative tail).
  void crop(int64_t length) { cache_.crop(length); }
  // Ready for a new sequence; the cache's storage is kept.
  void clear() { cache_.clear(); }

 private:
  model::CausalLMImpl& model_;
  std::vector<int64_t> taps_;
  model::KvCache cache_;
};

}  // namespace topotrain::infer
