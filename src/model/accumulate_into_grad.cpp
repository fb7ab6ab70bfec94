#include "topotrain/model/accumulate_into_grad.h"

#include <cstdint>
#include <stdexcept>

#include "kernel_launch.h"
#include "topotrain/core/error.h"

namespace topotrain::model {
namespace {

thread_local int open_scopes = 0;

#ifdef TOPOTRAIN_CUDA
bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Where kernels::accumulate_bf16 and accumulate_bf16_rows take `grad` into `sum`: a bf16
// gradient and an fp32 sum on one GPU, both contiguous, 16-byte aligned, whole 8-value vectors
// per `width` values (the tensor, or a row).
bool bf16_kernel_applies(const torch::Tensor& sum, const torch::Tensor& grad, int64_t width) {
  return own_kernels_apply(grad) && sum.scalar_type() == torch::kFloat32 && sum.device() == grad.device() &&
         sum.is_contiguous() && grad.is_contiguous() && width % 8 == 0 && aligned16(sum.data_ptr()) &&
         aligned16(grad.data_ptr());
}
#endif

}  // namespace

AccumulateIntoGrad::AccumulateIntoGrad() { ++open_scopes; }
AccumulateIntoGrad::~AccumulateIntoGrad() { --open_scopes; }
bool AccumulateIntoGrad::active() { return open_scopes > 0; }

bool add_into_grad(const torch::Tensor& master, const torch::Tensor& grad, const torch::Tensor& scale) {
  const torch::Tensor& sum = master.grad();
  if (!sum.defined()) return false;
  if (sum.sizes() != grad.sizes())
    throw std::invalid_argument(cat("add_into_grad: gradient of shape ", grad.sizes(), " for a .grad() of shape ",
                                    sum.sizes()));
  if (scale.defined()) {
    sum.addcmul_(grad, scale);
    return true;
  }
#ifdef TOPOTRAIN_CUDA
  if (bf16_kernel_applies(sum, grad, grad.numel())) {
    check_launch(kernels::accumulate_bf16(sum.data_ptr<float>(), grad.data_ptr(), grad.numel(), stream_of(grad)),
                 "accumulate_bf16");
    return true;
  }
#endif
  sum.add_(grad);
  return true;
}

bool add_permuted_into_grad(const torch::Tensor& master, const torch::Tensor& rows, const torch::Tensor& grad) {
  const torch::Tensor& sum = master.grad();
  if (!sum.defined()) return false;
  if (sum.sizes() != grad.sizes() || grad.dim() < 1 || rows.dim() != 1 || rows.size(0) != grad.size(0))
    throw std::invalid_argument(cat("add_permuted_into_grad: rows ", rows.sizes(), " of a gradient ", grad.sizes(),
                                    " for a .grad() of shape ", sum.sizes()));
#ifdef TOPOTRAIN_CUDA
  const int64_t columns = grad.size(0) > 0 ? grad.numel() / grad.size(0) : 0;
  if (bf16_kernel_applies(sum, grad, columns) && rows.device() == grad.device() &&
      rows.scalar_type() == torch::kInt64) {
    const auto order = rows.contiguous();
    check_launch(kernels::accumulate_bf16_permuted(sum.data_ptr<float>(), grad.data_ptr(), order.data_ptr<int64_t>(),
                                                   grad.size(0), columns, stream_of(grad)),
                 "accumulate_bf16_permuted");
    return true;
  }
#endif
  sum.index_add_(0, rows, grad.to(sum.scalar_type()));
  return true;
}

bool add_rows_into_grad(const torch::Tensor& master, const torch::Tensor& rows, const torch::Tensor& grad) {
  const torch::Tensor& sum = master.grad();
  if (!sum.defined()) return false;
  if (sum.dim() != 2 || grad.dim() != 2 || rows.dim() != 1 || grad.size(1) != sum.size(1) ||
      rows.size(0) != grad.size(0))
    throw std::invalid_argument(cat("add_rows_into_grad: rows ", rows.sizes(), " of a gradient ", grad.sizes(),
                                    " for a .grad() of shape ", sum.sizes()));
#ifdef TOPOTRAIN_CUDA
  if (bf16_kernel_applies(sum, grad, grad.size(1)) && rows.device() == grad.device() &&
      rows.scalar_type() == torch::kInt64) {
    const auto [sorted, order] = rows.sort(/*stable=*/true, 0, /*descending=*/false);
    check_launch(kernels::accumulate_bf16_rows(sum.data_ptr<float>(), grad.data_ptr(), sorted.data_ptr<int64_t>(),
                                               order.data_ptr<int64_t>(), rows.size(0), grad.size(1),
                                               stream_of(grad)),
                 "accumulate_bf16_rows");
    return true;
  }
#endif
  sum.add_(rows_gradient(rows, grad, sum.size(0), sum.scalar_type()));
  return true;
}

torch::Tensor rows_gradient(const torch::Tensor& rows, const torch::Tensor& grad, int64_t num_rows,
                            torch::ScalarType dtype) {
  return torch::embedding_backward(grad.to(dtype), rows, num_rows, /*padding_idx=*/-1,
                                   /*scale_grad_by_freq=*/false, /*sparse=*/false);
}

}  // namespace topotrain::model
