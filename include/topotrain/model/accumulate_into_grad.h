// Gradients of fp32 master weights added straight into master.grad() by the op that computes
// them, instead of through autograd.
//
// A master reaches the matmuls as a compute-dtype (bf16) copy made out of autograd's sight
// (ComputeWeight; the LM loss's weight), so its gradient comes back as a separate tensor:
// autograd would first make it an fp32 tensor of the master's size and AccumulateGrad would
// then add that into .grad(), two passes over every master per micro-batch; an embedding
// table's gradient, a few thousand rows, would become a dense table-sized tensor first. Inside
// an AccumulateIntoGrad scope those ops (and the embedding lookup) add the gradient into
// .grad() themselves, in one pass, and give autograd no gradient for that master.
//
// Contract:
// * The scope is read when the op runs forward, on the thread that opened it; its backward,
//   on whichever thread autograd runs it, does what the forward recorded.
// * It applies where master.grad() is defined when the backward runs (the GradReducer keeps
//   every trained parameter's .grad() bound to its bucket); a master without one gets its
//   gradient through autograd, as outside the scope.
// * Autograd still runs each master's AccumulateGrad node, with no gradient, which it skips:
//   post hooks on that node (the GradReducer's ready hook) fire as before, after the add.
// * For backward() only: torch::autograd::grad() of a loss built inside the scope returns no
//   gradient for a master whose .grad() is defined.
// * Adds into one .grad() never race: autograd runs one device's nodes on one thread, and a
//   master lives on one device.
#pragma once

#include <torch/torch.h>

namespace topotrain::model {

class AccumulateIntoGrad {
 public:
  AccumulateIntoGrad();
  ~AccumulateIntoGrad();
  AccumulateIntoGrad(const AccumulateIntoGrad&) = delete;
  AccumulateIntoGrad& operator=(const AccumulateIntoGrad&) = delete;

  // Whether a scope is open on the calling thread.
  static bool active();
};

// When master.grad() is defined: adds grad (or grad * scale, scale a one-element tensor, when
// scale is defined) into it and returns true. Otherwise returns false and changes nothing.
// A bf16 gradient into an fp32 .grad() on a GPU is one kernel (kernels::accumulate_bf16).
bool add_into_grad(const torch::Tensor& master, const torch::Tensor& grad, const torch::Tensor& scale = {});
// When master.grad() is defined: adds grad, of the master's shape with its dim-0 rows in another
// order (row i is master row rows[i]; rows int64 a permutation of [0, rows)), into it and
// returns true; otherwise false. A bf16 gradient into an fp32 .grad() on a GPU is one kernel
// (kernels::accumulate_bf16_permuted), elsewhere index_add_ of the gradient in the .grad()'s dtype.
bool add_permuted_into_grad(const torch::Tensor& master, const torch::Tensor& rows, const torch::Tensor& grad);
// When master.grad() ([rows, columns]) is defined: adds row i of grad [n, columns] into its row
// rows[i] (int64 [n], every index in range; repeats sum) and returns true; otherwise false. The
// sum of a row's repeats does not depend on scheduling: on a GPU with a bf16 gradient one
// stable sort and one kernel (kernels::accumulate_bf16_rows), elsewhere rows_gradient, added.
bool add_rows_into_grad(const torch::Tensor& master, const torch::Tensor& rows, const torch::Tensor& grad);
// The dense [num_rows, columns] gradient, in `dtype`, of a lookup of `rows` whose output got
// `grad`: what autograd's embedding backward makes.
torch::Tensor rows_gradient(const torch::Tensor& rows, const torch::Tensor& grad, int64_t num_rows,
                            torch::ScalarType dtype);

}  // namespace topotrain::model
