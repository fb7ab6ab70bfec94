// Values the host computed (indices, row weights) as a 1-D tensor on the device that uses them,
// without holding the host.
//
// Contract: on a GPU the values are staged in pinned memory and their copy is queued on the
// current stream, behind the work already there; the host goes on at once. A copy from
// pageable memory would first wait for everything queued on the stream, so the device ran dry
// while the host queued the next kernels (a drafter step made about ten such copies). Torch's
// pinned allocator keeps the staging buffer until the copy has run. Elsewhere it is a plain
// CPU tensor.
#pragma once

#include <algorithm>
#include <vector>

#include <torch/torch.h>

namespace topotrain::model {

template <class T>
torch::Tensor host_values_on(const std::vector<T>& values, const torch::Device& device) {
  const auto staging = torch::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value).pinned_memory(device.is_cuda());
  auto host = torch::empty({static_cast<int64_t>(values.size())}, staging);
  std::copy(values.begin(), values.end(), host.template data_ptr<T>());
  return host.to(device, /*non_blocking=*/true);
}

}  // namespace topotrain::model
