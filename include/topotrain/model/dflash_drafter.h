// The DFlash drafter: fc over the target's concatenated tap layers, RMSNorm (the fused
// context), then Qwen3 decoder layers whose attention takes queries from the blocks and
// keys/values from [fused context ; block] under the DFlash mask (dflash_attention.h). The
// target's embedding, final norm and lm_head are frozen copies on the drafter.
//
// Trainable parameter names (stable, HF-like; what named_parameters() returns and what the
// optimizer, the gradient reducer and checkpoints see): fc.weight, hidden_norm.weight,
// layers.N.input_layernorm.weight, layers.N.post_attention_layernorm.weight,
// layers.N.self_attn.{q,k,v,o}_proj.weight, layers.N.self_attn.{q,k}_norm.weight,
// layers.N.mlp.{gate,up,down}_proj.weight. The frozen target tensors are buffers
// (target_embed_tokens, target_norm, target_lm_head), never parameters: they hold the
// compute dtype, need no master copy and move with to(device).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "topotrain/batch/packed_batch.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/dflash_anchors.h"
#include "topotrain/model/dflash_attention.h"
#include "topotrain/model/dflash_config.h"
#include "topotrain/model/layers.h"

namespace topotrain::model {

// One packed micro-batch as a target sends it, on the drafter's device.
//
// A link that moves one tensor per batch can send [T, (taps + 1) * H] (the taps, then the
// final hidden state) and hand `taps` and `final_hidden` as narrow() views of it.
struct DFlashBatch {
  PackedBatch packed;        // loss_mask 1 = a token the drafter learns (anchors only there)
  torch::Tensor taps;        // [T, taps * H]: outputs of the tap layers, concatenated in tap order
  torch::Tensor final_hidden;  // [T, H]: the target's last hidden state after its final norm;
                               // needed only by DFlashLoss::kl (may stay undefined otherwise)
};

struct DFlashStepOutput {
  // fp32 scalar, differentiable: sum over valid slots of w_k * loss (CE or KL). Divide by
  // the global weight_sum (summed over drafter ranks and micro-batches) for the mean.
  torch::Tensor loss_sum;
  double weight_sum = 0;
  // Per slot k in [0, B): valid slots and those whose argmax is the data's token
  // (slot 0, the anchor, is never valid). slot_correct is int64 [B] on the device, so
  // reading it does not stall the step until the caller asks.
  torch::Tensor slot_correct;
  std::vector<int64_t> slot_valid;
  int64_t num_blocks = 0;
  // Per valid slot, int64 on the device: its slot k and the data's token it predicts (what
  // TrivialDrafterCounts counts). Undefined when no slot is valid.
  torch::Tensor label_slots, labels;
};

class DFlashDrafterImpl : public torch::nn::Module {
 public:
  // Parameters fp32 on the CPU, initialised as Qwen3 (normal(0, initializer_range), norms
  // at one) from torch's global generator; the frozen target tensors random likewise until
  // load_target_tensors. Validates the config.
  explicit DFlashDrafterImpl(const DFlashConfig& config);

  const DFlashConfig& config() const { return config_; }
  const std::vector<int64_t>& taps() const { return taps_; }
  torch::ScalarType compute_dtype() const { return compute_dtype_; }
  // Also casts the frozen target tensors, which are kept in the compute dtype.
  void set_compute_dtype(torch::ScalarType dtype);
  DFlashAttentionOptions attention_options() const;  // backend chosen for the current device and dtype
  void force_attention_options(std::optional<DFlashAttentionOptions> options) { forced_attention_ = options; }

  // Copies the target's model.embed_tokens.weight [V, H], model.norm.weight [H] and
  // lm_head.weight [V, H] (the embedding again when the target ties them); shapes are
  // checked against the config, errors name the tensor.
  void load_target_tensors(const torch::Tensor& embed_tokens, const torch::Tensor& final_norm,
                           const torch::Tensor& lm_head);
  void load_target_tensors(CausalLMImpl& target);

  // The drafter's last hidden states of every block slot, [blocks * B, H], before the
  // final norm.
  torch::Tensor forward_blocks(const DFlashBatch& batch, const DFlashBlocks& blocks);
  // The draft layers over the blocks, what forward_blocks and a decoder's proposals
  // (infer/dflash_proposer.h) share: `block_tokens` int64 [blocks * B] (anchor, then mask
  // tokens) at `block_rotary`'s positions, each layer's context keys and values from
  // `context_kv(layer index, that layer's attention)`, the mask as `blocks` lays it out.
  // Returns the last hidden states [blocks * B, H], before the final norm.
  using ContextKeysValues = std::function<AttentionImpl::KeysValues(size_t layer, AttentionImpl& attention)>;
  torch::Tensor draft_layers(const torch::Tensor& block_tokens, const RotaryTables& block_rotary,
                             const DFlashBlocks& blocks, const ContextKeysValues& context_kv,
                             const DFlashAttentionOptions& attention);
  // forward_blocks, then the loss and the per-slot metrics at the valid slots only.
  DFlashStepOutput forward(const DFlashBatch& batch, const DFlashBlocks& blocks);

  Projection fc{nullptr};
  RMSNorm hidden_norm{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::Tensor target_embed_tokens, target_norm, target_lm_head;

 private:
  void check_batch(const DFlashBatch& batch, const DFlashBlocks& blocks) const;

  DFlashConfig config_;
  std::vector<int64_t> taps_;
  torch::ScalarType compute_dtype_ = torch::kFloat32;
  std::optional<DFlashAttentionOptions> forced_attention_;
};
TORCH_MODULE(DFlashDrafter);

// Loss weight of slot k (k >= 1): exp(-(k - 1) / gamma).
double dflash_slot_weight(int64_t slot, double gamma);

}  // namespace topotrain::model
