#include "topotrain/model/kv_cache.h"

#include <algorithm>
#include <stdexcept>

#include "topotrain/core/error.h"

namespace topotrain::model {
namespace {

// Room for `rows` rows in `storage`, the committed `keep` rows copied over when it grows.
void ensure_rows(torch::Tensor& storage, int64_t rows, int64_t keep) {
  const int64_t capacity = storage.size(0);
  if (rows <= capacity) return;
  auto grown = torch::empty({std::max(rows, 2 * capacity), storage.size(1), storage.size(2)}, storage.options());
  grown.narrow(0, 0, keep).copy_(storage.narrow(0, 0, keep));
  storage = grown;
}

}  // namespace

KvCache::KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, torch::TensorOptions options) {
  for (int64_t i = 0; i < layers; ++i) {
    keys_.push_back(torch::empty({0, kv_heads, head_dim}, options));
    values_.push_back(torch::empty({0, kv_heads, head_dim}, options));
  }
  written_.assign(static_cast<size_t>(layers), 0);
}

KvCache::Rows KvCache::extend(int64_t layer, const torch::Tensor& keys, const torch::Tensor& values) {
  auto& k = keys_.at(static_cast<size_t>(layer));
  auto& v = values_.at(static_cast<size_t>(layer));
  const int64_t n = keys.size(0);
  if (keys.dim() != 3 || keys.sizes() != values.sizes() || keys.size(1) != k.size(1) || keys.size(2) != k.size(2)) {
    throw std::invalid_argument(cat("KvCache::extend: keys and values must be [rows, ", k.size(1), ", ", k.size(2),
                                    "], got ", keys.sizes(), " and ", values.sizes()));
  }
  ensure_rows(k, length_ + n, length_);
  ensure_rows(v, length_ + n, length_);
  k.narrow(0, length_, n).copy_(keys);
  v.narrow(0, length_, n).copy_(values);
  written_[static_cast<size_t>(layer)] = n;
  return {k.narrow(0, 0, length_ + n), v.narrow(0, 0, length_ + n)};
}

KvCache::Rows KvCache::rows(int64_t layer) const {
  const auto i = static_cast<size_t>(layer);
  return {keys_.at(i).narrow(0, 0, length_), values_.at(i).narrow(0, 0, length_)};
}

void KvCache::commit() {
  const int64_t rows = written_.empty() ? 0 : written_.front();
  for (size_t i = 0; i < written_.size(); ++i) {
    if (written_[i] != rows) {
      throw std::invalid_argument(cat("KvCache::commit: layer ", i, " took ", written_[i], " new rows, layer 0 ", rows));
    }
  }
  written_.assign(written_.size(), 0);
  length_ += rows;
}

void KvCache::crop(int64_t length) {
  if (length < 0 || length > length_) {
    throw std::invalid_argument(cat("KvCache::crop: length ", length, " is outside [0, ", length_, "]"));
  }
  written_.assign(written_.size(), 0);
  length_ = length;
}

}  // namespace topotrain::model
