#include "topotrain/model/compute_weight.h"

#include <cstdint>
#include <stdexcept>

#include "kernel_launch.h"
#include "topotrain/core/error.h"
#include "topotrain/model/accumulate_into_grad.h"

namespace topotrain::model {
namespace {

// A copy's row order, handed to the autograd function as a plain value: an undefined tensor
// cannot be one of its inputs.
struct RowOrder {
  torch::Tensor rows;  // undefined: the masters' own
};

// Forward hands back the cached copy; backward splits the copy's gradient by master and casts
// each part to its master's dtype: what cat(master.to(dtype)...)'s backward does. A copy in a
// row order gives its one master the gradient's rows back in the master's order. Inside an
// AccumulateIntoGrad scope a part is added into its master's .grad() instead, where that exists.
class CachedCastFunction : public torch::autograd::Function<CachedCastFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& copy,
                               const RowOrder& order, torch::TensorList masters) {
    ctx->saved_data["masters"] = masters.vec();
    ctx->saved_data["into_grad"] = AccumulateIntoGrad::active();
    ctx->saved_data["rows"] =
        order.rows.defined() ? std::vector<torch::Tensor>{order.rows} : std::vector<torch::Tensor>{};
    return copy;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto masters = ctx->saved_data["masters"].toTensorVector();
    const auto rows = ctx->saved_data["rows"].toTensorVector();
    const bool into_grad = ctx->saved_data["into_grad"].toBool();
    torch::autograd::tensor_list out{torch::Tensor(), torch::Tensor()};
    if (!rows.empty()) {
      const auto& m = masters.front();
      const bool added = into_grad && add_permuted_into_grad(m, rows.front(), grads[0]);
      out.push_back(added ? torch::Tensor()
                          : torch::empty(m.sizes(), m.options()).index_copy_(0, rows.front(),
                                                                            grads[0].to(m.scalar_type())));
      return out;
    }
    int64_t begin = 0;
    for (const auto& m : masters) {
      const auto part = grads[0].narrow(0, begin, m.size(0));
      begin += m.size(0);
      const bool added = into_grad && add_into_grad(m, part);
      out.push_back(added ? torch::Tensor() : part.to(m.scalar_type()));
    }
    return out;
  }
};

// One master's rows in the order of `rows`, cast: on a GPU one pass that reads through the order.
torch::Tensor cast_rows(const torch::Tensor& master, torch::ScalarType dtype, const torch::Tensor& rows) {
#ifdef TOPOTRAIN_CUDA
  const int64_t columns = master.size(0) > 0 ? master.numel() / master.size(0) : 0;
  if (own_kernels_apply(master.device(), dtype) && master.scalar_type() == torch::kFloat32 &&
      master.is_contiguous() && columns % 8 == 0 && rows.device() == master.device() &&
      rows.scalar_type() == torch::kInt64 && reinterpret_cast<std::uintptr_t>(master.data_ptr()) % 16 == 0) {
    const auto order = rows.contiguous();
    auto out = torch::empty(master.sizes(), master.options().dtype(dtype));
    check_launch(kernels::cast_rows_bf16(master.data_ptr<float>(), order.data_ptr<int64_t>(), out.data_ptr(),
                                         master.size(0), columns, stream_of(master)),
                 "cast_rows_bf16");
    return out;
  }
#endif
  return master.index_select(0, rows).to(dtype);
}

torch::Tensor cast(const std::vector<torch::Tensor>& masters, torch::ScalarType dtype, const torch::Tensor& rows) {
  if (rows.defined()) return cast_rows(masters.front(), dtype, rows);
  if (masters.size() == 1) return masters.front().to(dtype);
  std::vector<torch::Tensor> parts;
  for (const auto& m : masters) parts.push_back(m.to(dtype));
  return torch::cat(parts, 0);
}

void check_rows(const std::vector<torch::Tensor>& masters, const torch::Tensor& rows) {
  if (!rows.defined()) return;
  if (masters.size() != 1 || rows.dim() != 1 || masters.front().dim() < 1 || rows.size(0) != masters.front().size(0))
    throw std::invalid_argument(cat("ComputeWeight: a row order [", rows.sizes(), "] takes one master of as many rows, got ",
                                    masters.size(), " master(s)", masters.empty() ? "" : cat(", the first ", masters.front().sizes())));
}

}  // namespace

bool ComputeWeight::current(const std::vector<torch::Tensor>& masters, torch::ScalarType dtype,
                            const torch::Tensor& rows) const {
  if (!copy_.defined() || copy_.scalar_type() != dtype || masters.size() != masters_.size()) return false;
  if (rows.defined() != rows_.defined() || (rows.defined() && !rows.is_same(rows_))) return false;
  for (size_t i = 0; i < masters.size(); ++i) {
    if (!masters[i].is_same(masters_[i]) || masters[i].data_ptr() != storages_[i] ||
        masters[i]._version() != versions_[i]) {
      return false;
    }
  }
  return true;
}

torch::Tensor ComputeWeight::get(const std::vector<torch::Tensor>& masters, torch::ScalarType dtype,
                                 const torch::Tensor& rows) {
  check_rows(masters, rows);
  if (masters.size() == 1 && masters.front().scalar_type() == dtype) {
    return rows.defined() ? masters.front().index_select(0, rows) : masters.front();
  }
  if (!torch::GradMode::is_enabled()) return cast(masters, dtype, rows);
  // As a TensorList, so that autograd sees the masters as inputs.
  return CachedCastFunction::apply(values(masters, dtype, rows), RowOrder{rows}, torch::TensorList(masters));
}

torch::Tensor ComputeWeight::values(const std::vector<torch::Tensor>& masters, torch::ScalarType dtype,
                                    const torch::Tensor& rows) {
  check_rows(masters, rows);
  if (masters.size() == 1 && masters.front().scalar_type() == dtype) {
    return rows.defined() ? masters.front().detach().index_select(0, rows) : masters.front().detach();
  }
  if (!torch::GradMode::is_enabled()) return cast(masters, dtype, rows);
  if (!current(masters, dtype, rows)) {
    copy_ = torch::Tensor();  // free the stale copy before making the new one
    {
      torch::NoGradGuard no_grad;
      copy_ = cast(masters, dtype, rows);
    }
    rows_ = rows;
    masters_ = masters;
    storages_.clear();
    versions_.clear();
    for (const auto& m : masters) {
      storages_.push_back(m.data_ptr());
      versions_.push_back(m._version());
    }
  }
  return copy_;
}

}  // namespace topotrain::model
