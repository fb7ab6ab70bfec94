#include "topotrain/store/checkpoint_state.h"

#include <cstdio>
#include <stdexcept>

namespace topotrain {
namespace {

// FNV-1a: stable across runs and builds, unlike std::hash.
struct Fnv1a {
  std::uint64_t value = 1469598103934665603ull;
  void add(const void* data, std::size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < size; ++i) value = (value ^ bytes[i]) * 1099511628211ull;
  }
  void add(const std::string& text) { add(text.data(), text.size() + 1); }
  void add(std::int64_t number) { add(&number, sizeof number); }
};

}  // namespace

std::string model_identity(const std::string& preset, const std::map<std::string, at::Tensor>& parameters) {
  Fnv1a hash;
  for (const auto& [name, tensor] : parameters) {  // std::map: name order, the same on every rank
    hash.add(name);
    hash.add(dtype_name(tensor.scalar_type()));
    for (std::int64_t size : tensor.sizes()) hash.add(size);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash.value));
  return preset + "/" + hex;
}

void CheckpointExpectations::expect_like(const std::map<std::string, at::Tensor>& named) {
  for (const auto& [name, tensor] : named) tensors[name] = {tensor.sizes().vec(), tensor.scalar_type()};
}

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: throw std::runtime_error(std::string("checkpoints cannot store dtype ") + c10::toString(type));
  }
}

}  // namespace topotrain
