// Qwen3-MoE sparse block: router softmax -> top-k -> optional renormalisation, dropless
// experts stored stacked, and HF's load-balancing auxiliary loss.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "topotrain/model/config.h"
#include "topotrain/model/layers.h"

namespace topotrain::model {

enum class ExpertBackend {
  // Tokens sorted by expert, one matmul pair per expert (any device and dtype; reads the
  // per-expert counts back to the host).
  sorted_loop,
  // Tokens sorted by expert, one at::_grouped_mm per projection (CUDA bf16
  // in a CUDA build); no host synchronisation.
  grouped_mm,
};

std::string to_string(ExpertBackend backend);

// Which expert each of the dispatch's row groups holds. Both layouts give the same results bit
// for bit: a group's rows, their order and its expert's weights are the same, only the groups'
// order differs.
enum class ExpertLayout {
  // Group e holds expert e's rows.
  expert_order,
  // The groups busiest first, by the experts' loads in the forward before the one that cast
  // the experts' compute copies (once per optimizer step: every micro-batch of a step has one
  // order). CUTLASS deals a grouped weight gradient's output tiles to its CTAs group by group,
  // so busy experts between idle ones leave some CTAs more full tiles than an even deal would;
  // busiest first deals them evenly. The copies are cast in that order and their gradients
  // added back through it (ComputeWeight's row order), so the order itself costs no pass over
  // the weights. Acts where the experts' weight gradients are computed in a compute dtype
  // other than the masters' (a bf16 copy); elsewhere the groups stay in expert order. The
  // default, as it trains faster than expert order (bench/moe/RESULTS.md).
  busiest_first,
};

std::string to_string(ExpertLayout layout);
ExpertBackend choose_expert_backend(const torch::Device& device, torch::ScalarType dtype, const ModelConfig& config);

// Router statistics of a forward's MoE layers. HF's load_balancing_loss_func concatenates
// the router logits of all layers before taking means, which equals sums over tokens and
// layers divided by the total row count: keeping sums avoids holding every layer's logits.
// The selection counts stay per layer (E numbers each), for peak_expert_load; the loss sums them.
struct RouterLoad {
  std::vector<torch::Tensor> layer_counts;  // fp32 [E] per MoE layer, in order: top-k selections (no gradient)
  torch::Tensor probability_sums;   // fp32 [E]: sum of router softmax probabilities
  int64_t rows = 0;                 // tokens x layers summed

  // probs: fp32 router softmax [T, E]; selections: how many of the T * k top-k choices
  // went to each expert [E] (any dtype), the counts the dispatch already makes.
  void add(const torch::Tensor& probs, const torch::Tensor& selections);
};

// The router's decisions for T tokens over E experts, HF's: softmax in fp32, top-k, the k
// weights optionally renormalised to sum to 1.
struct Routing {
  torch::Tensor probs;     // fp32 [T, E], differentiable (the load-balancing loss reads it)
  torch::Tensor weights;   // fp32 [T, k], differentiable: the chosen probabilities, renormalised when asked
  torch::Tensor selected;  // [T, k] the chosen experts, most probable first: uint8 from the kernel, else int64
  torch::Tensor counts;    // integer [E]: how many of the T * k choices went to each expert
};

// The router GEMM: logits fp32 [T, E] = x [T, H] . weight fp32 [E, H]^T, in fp32 at every
// compute dtype: bf16 rounding of near-tied logits flips top-k choices, and a flipped choice
// sends the token through another expert. For bf16 x on CUDA with E <= 64 and H % 8 == 0,
// H <= 3072 one kernel forward and two backward that read x as it is; otherwise torch ops on an
// fp32 copy of x.
torch::Tensor router_logits(const torch::Tensor& x, const torch::Tensor& weight);

// logits fp32 [T, E], the router GEMM's output. One kernel each way for CUDA logits with
// E <= 256 and k <= 32 (at every compute dtype: the router runs in fp32), torch ops otherwise.
// Ties between equal probabilities go to the lower expert in the kernel; torch's topk leaves
// their order unspecified.
Routing route_tokens(const torch::Tensor& logits, int64_t k, bool renormalize);

// num_experts * sum_e (counts_e / rows) * (probability_sums_e / rows); zero when empty.
// This is HF's aux loss before router_aux_loss_coef is applied.
torch::Tensor load_balancing_loss(const RouterLoad& load, int64_t num_experts);

// fp32 scalar on the counts' device: the busiest expert's selections over the mean per expert,
// in the layer where that is highest (0 without MoE layers). 1 is an even split; num_experts /
// top_k means every token chose the same experts. The load-balancing loss cannot tell these
// apart when the router's probabilities are near uniform (it is top_k in both), and the
// experts' weight-gradient GEMMs run slower the more uneven the split (bench/moe/RESULTS.md).
torch::Tensor peak_expert_load(const RouterLoad& load);

// A token's k expert outputs weighted by its router weights, read where the experts left them:
// y_rows [N, H] in the compute dtype holds every (token, choice) output once, rows int64 [T, k]
// names the row of token t's choice j and must be a permutation of [0, N) (N = T * k: every row
// is one choice's), weights fp32 [T, k] -> [T, H] in y_rows' dtype. One kernel each way for bf16
// on CUDA (fp32 sums, H % 8 == 0, k <= 8), which reads the rows through the permutation instead
// of gathering them first; torch ops otherwise (weights rounded to y's dtype first).
torch::Tensor combine_expert_outputs(const torch::Tensor& y_rows, const torch::Tensor& rows,
                                     const torch::Tensor& weights);

// The stacked expert weights, HF's per-expert Linear layouts stacked on dim 0:
// gate_up_proj [E, 2*I, H] (gate rows first, then up rows), down_proj [E, H, I].
class ExpertsImpl : public torch::nn::Module {
 public:
  ExpertsImpl(int64_t num_experts, int64_t hidden, int64_t intermediate, double init_std);
  // x_sorted [N, H]: rows grouped by expert, counts integer [E] (sum N) the groups' rows. Group
  // g holds expert group_experts[g]'s rows (int64 [E], a permutation; undefined: expert g's).
  torch::Tensor forward(const torch::Tensor& x_sorted, const torch::Tensor& counts, ExpertBackend backend,
                        const torch::Tensor& group_experts = {});
  // Whether the compute copies in `dtype` kept for the order `group_experts` are current: the
  // next forward with them reuses them rather than casting the masters again.
  bool compute_copies_current(torch::ScalarType dtype, const torch::Tensor& group_experts) const;

  torch::Tensor gate_up_proj, down_proj;

 private:
  ComputeWeight gate_up_compute_, down_compute_;
};
TORCH_MODULE(Experts);

class SparseMoeBlockImpl : public torch::nn::Module {
 public:
  explicit SparseMoeBlockImpl(const ModelConfig& config);
  // x [T, H]; adds this layer's router statistics to `load` when it is given.
  torch::Tensor forward(const torch::Tensor& x, ExpertBackend backend, RouterLoad* load);
  // The layout of the forwards to come (busiest_first until set).
  void set_layout(ExpertLayout layout) { layout_ = layout; }
  // Which expert each group of the last busiest-first forward held (undefined before one).
  const torch::Tensor& group_experts() const { return group_experts_; }

  Projection gate{nullptr};
  Experts experts{nullptr};

 private:
  struct Groups;
  Groups groups(const torch::Tensor& x, const Routing& routing);

  int64_t top_k_;
  bool norm_topk_prob_;
  ExpertLayout layout_ = ExpertLayout::busiest_first;
  torch::Tensor previous_counts_;  // the last forward's, with gradients: the next order's loads
  torch::Tensor group_experts_;    // int64 [E]: group g holds expert group_experts_[g]
  torch::Tensor group_keys_;       // [E] in the router's choice dtype: expert e's group
};
TORCH_MODULE(SparseMoeBlock);

}  // namespace topotrain::model
