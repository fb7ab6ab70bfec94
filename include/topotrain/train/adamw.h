// AdamW over named fp32 master parameters, with state we own (so checkpoints store it by
// parameter name): exp_avg and exp_avg_sq per parameter, one step count.
//
// Weight decay applies to matrices only (dim >= 2): norms' gains are left undecayed, as
// in most LM recipes. On CUDA the whole update is one launch of our kernel
// (adamw_kernels.cu) over a table of every parameter, reading each element's parameter,
// gradient and moments once; elsewhere a per-tensor loop of in-place ops.
#pragma once

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

namespace topotrain {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWConfig config);

  // One update at learning rate `lr` from the parameters' current .grad() multiplied by
  // `grad_factor` (the loss's normalisation and gradient clipping), multiplied as it is read:
  // .grad() is left as it was, and no pass over the gradients runs before the step.
  void step(double lr, double grad_factor = 1.0);
  // The same with the factor where the parameters are (a one-element fp64 tensor on their
  // device), read when the update runs, so that the host need not wait for it: where it is
  // not finite the update changes nothing. The caller that later reads that it was skipped
  // calls unstep(), which takes back the step count (and so the next step's bias correction).
  void step(double lr, const torch::Tensor& grad_factor);
  void unstep();

  std::int64_t steps() const { return steps_; }
  // State by name for checkpoints: "exp_avg/<param>", "exp_avg_sq/<param>".
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  // Restores what state() returned (same names and shapes) and the step count.
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state, std::int64_t steps);

 private:
  // device_grad_factor: nullptr, or where step(lr, tensor) keeps its factor on the device.
  void step_fused(double lr, double grad_factor, const double* device_grad_factor);
  void step_loop(double lr, double grad_factor);
  // 1 - beta^t at this step t: both paths divide the moments by it.
  double bias_correction(double beta) const;
  bool on_cuda() const;  // the parameters are on a GPU: the one-launch step

  struct Slot {
    std::string name;
    torch::Tensor param;
    torch::Tensor exp_avg;
    torch::Tensor exp_avg_sq;
    bool decay;
  };
  std::vector<Slot> slots_;
  // The CUDA step's table of parameters (kernels::AdamWTensor entries), kept while their
  // pointers stay: the host copy is pinned, the device copy what the kernel reads.
  torch::Tensor table_on_host_, table_on_device_;
  AdamWConfig config_;
  std::int64_t steps_ = 0;
};

}  // namespace topotrain
