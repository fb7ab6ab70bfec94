// A weight in the compute dtype (bf16), made from its fp32 master(s) once per change of the
// masters rather than once per use: under gradient accumulation the masters change once per
// optimizer step, and casting them (and concatenating fused projections' weights) on every
// micro-batch repeats the same work.
//
// Invariant, checked on every get(): the copy is current iff every master is the same tensor
// with the same storage and the same version counter as when the copy was made. Every
// in-place torch op bumps the version (the optimizer's step, a checkpoint's copy_); a writer
// that bypasses torch's ops (a raw NCCL broadcast into a parameter) must run before the first
// forward, as the trainers' start-of-run broadcast does.
//
// Only with grad mode on: there the copy lives until backward anyway (the GEMMs save it), so
// keeping it between micro-batches costs no peak memory. Without grad (a frozen target's
// forward) a layer's cast is transient, and keeping every layer's would add 2 bytes per
// parameter; get() then casts and keeps nothing.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace topotrain::model {

class ComputeWeight {
 public:
  // The masters concatenated along dim 0 and cast to `dtype`; differentiable with respect to
  // each master, whose gradient comes back in the master's dtype. A single master in `dtype`
  // is returned as it is.
  //
  // With `rows` (int64 [R] on the master's device, a permutation of [0, R)), one master [R, ...]
  // with its dim-0 rows in that order: row i is master row rows[i], and row i's gradient goes
  // back to master row rows[i]. The copy is current only for the same `rows` tensor. On a GPU
  // (fp32 master, bf16 copy) the cast reads through the order in its one pass and the gradient
  // is added back through it (add_permuted_into_grad): an order costs no pass of its own.
  torch::Tensor get(const std::vector<torch::Tensor>& masters, torch::ScalarType dtype,
                    const torch::Tensor& rows = {});
  // The same values without autograd history, for a consumer that routes the masters'
  // gradients itself (the LM loss).
  torch::Tensor values(const std::vector<torch::Tensor>& masters, torch::ScalarType dtype,
                       const torch::Tensor& rows = {});
  // Whether the kept copy is these masters' values as they are now, in `dtype` and in the
  // order of `rows`: the next get() or values() with them reuses it.
  bool current(const std::vector<torch::Tensor>& masters, torch::ScalarType dtype,
               const torch::Tensor& rows = {}) const;

 private:
  torch::Tensor copy_;  // no autograd history
  torch::Tensor rows_;  // the copy's row order (undefined: the masters' own)
  // The masters as of the copy, held so that a freed master's address cannot come back as a
  // "same" tensor.
  std::vector<torch::Tensor> masters_;
  std::vector<const void*> storages_;
  std::vector<uint32_t> versions_;
};

}  // namespace topotrain::model
