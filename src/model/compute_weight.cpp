#include "topotrain/model/compute_weight.h"

#include "topotrain/model/accumulate_into_grad.h"

namespace topotrain::model {
namespace {

// Forward hands back the cached copy; backward splits the copy's gradient by master and casts
// each part to its master's dtype: what cat(master.to(dtype)...)'s backward does. Inside an
// AccumulateIntoGrad scope a part is added into its master's .grad() instead, where that exists.
class CachedCastFunction : public torch::autograd::Function<CachedCastFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& copy,
                               torch::TensorList masters) {
    ctx->saved_data["masters"] = masters.vec();
    ctx->saved_data["into_grad"] = AccumulateIntoGrad::active();
    return copy;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto masters = ctx->saved_data["masters"].toTensorVector();
    const bool into_grad = ctx->saved_data["into_grad"].toBool();
    torch::autograd::tensor_list out{torch::Tensor()};
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

torch::Tensor cast(const std::vector<torch::Tensor>& masters, torch::ScalarType dtype) {
  if (masters.size() == 1) return masters.front().to(dtype);
  std::vector<torch::Tensor> parts;
  for (const auto& m : masters) parts.push_back(m.to(dtype));
  return torch::cat(parts, 0);
}

}  // namespace

bool ComputeWeight::current(const std::vector<torch::Tensor>& masters, torch::ScalarType dtype) const {
  if (!copy_.defined() || copy_.scalar_type() != dtype || masters.size() != masters_.size()) return false;
  for (size_t i = 0; i < masters.size(); ++i) {
    if (!masters[i].is_same(masters_[i]) || masters[i].data_ptr() != storages_[i] ||
        masters[i]._version() != versions_[i]) {
      return false;
    }
  }
  return true;
}

torch::Tensor ComputeWeight::get(const std::vector<torch::Tensor>& masters, torch::ScalarType dtype) {
  if (masters.size() == 1 && masters.front().scalar_type() == dtype) return masters.front();
  if (!torch::GradMode::is_enabled()) return cast(masters, dtype);
  // As a TensorList, so that autograd sees the masters as inputs.
  return CachedCastFunction::apply(values(masters, dtype), torch::TensorList(masters));
}

torch::Tensor ComputeWeight::values(const std::vector<torch::Tensor>& masters, torch::ScalarType dtype) {
  if (masters.size() == 1 && masters.front().scalar_type() == dtype) return masters.front().detach();
  if (!torch::GradMode::is_enabled()) return cast(masters, dtype);
  if (!current(masters, dtype)) {
    copy_ = torch::Tensor();  // free the stale copy before making the new one
    {
      torch::NoGradGuard no_grad;
      copy_ = cast(masters, dtype);
    }
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
