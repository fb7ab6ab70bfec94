// The keys and values of the rows a decoder has already seen, per attention layer, so that a
// decoding step projects only its new rows. Rows are positions 0..length()-1 of one sequence.
//
// A step writes its n new rows into every layer (extend), then commit() makes them part of
// the cache; crop() forgets the rows past a length (a speculative block's rejected tail), and
// their storage is written over by the next step. Storage grows by doubling and is kept
// across clear(), so that decoding prompt after prompt does not allocate per step.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace topotrain::model {

class KvCache {
 public:
  // Layers of kv_heads x head_dim keys and values in `options`' dtype and device.
  KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, torch::TensorOptions options);

  int64_t length() const { return length_; }
  int64_t layers() const { return static_cast<int64_t>(keys_.size()); }

  struct Rows {
    torch::Tensor keys, values;  // [rows, kv_heads, head_dim], views into the cache
  };
  // Writes `keys` and `values` ([n, kv_heads, head_dim]) as rows length()..length()+n-1 of
  // `layer` and returns that layer's rows 0..length()+n-1. Every layer of a step takes the
  // same n; commit() follows.
  Rows extend(int64_t layer, const torch::Tensor& keys, const torch::Tensor& values);
  // The committed rows of `layer`.
  Rows rows(int64_t layer) const;
  // The rows extend() wrote are committed: length() grows by their n. Throws
  // std::invalid_argument unless every layer took the same n since the last commit.
  void commit();
  // Forgets the rows from `length` on; throws std::invalid_argument beyond length().
  void crop(int64_t length);
  void clear() { crop(0); }

 private:
  std::vector<torch::Tensor> keys_, values_;  // [capacity, kv_heads, head_dim] per layer
  std::vector<int64_t> written_;  // rows extend() wrote past length_, per layer
  int64_t length_ = 0;
};

}  // namespace topotrain::model
