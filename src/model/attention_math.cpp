#include "topotrain/model/attention_math.h"

#include <limits>
#include <stdexcept>
#include <vector>

#include "topotrain/core/error.h"

namespace topotrain::model {

torch::Tensor attention_math(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& hidden, double scale) {
  const int64_t rank = q.dim();
  if (rank < 3 || k.dim() != rank || k.sizes() != v.sizes() || q.size(-1) != k.size(-1) ||
      q.size(-3) % k.size(-3) != 0 || q.sizes().slice(0, rank - 3) != k.sizes().slice(0, rank - 3)) {
    throw std::invalid_argument(cat("attention_math: expected q [..., Hq, Sq, D], k/v [..., Hkv, Sk, D] with Hq a "
                                    "multiple of Hkv, got q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes()));
  }
  const int64_t kv_heads = k.size(-3), groups = q.size(-3) / kv_heads, queries = q.size(-2), keys = k.size(-2),
                dim = q.size(-1);
  const std::vector<int64_t> leading(q.sizes().begin(), q.sizes().end() - 3);
  auto shape = [&](std::initializer_list<int64_t> last) {
    auto sizes = leading;
    sizes.insert(sizes.end(), last);
    return sizes;
  };
  // Each kv head's group of query heads as one matrix of G * Sq rows against that head's keys.
  auto scores = torch::matmul(q.reshape(shape({kv_heads, groups * queries, dim})), k.transpose(-2, -1))
                    .view(shape({kv_heads, groups, queries, keys})) *
                scale;
  scores = scores.masked_fill(hidden.unsqueeze(-3).unsqueeze(-3), -std::numeric_limits<double>::infinity());
  const auto softmax_dtype = q.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  auto probs = torch::softmax(scores, -1, softmax_dtype).to(q.scalar_type());
  return torch::matmul(probs.view(shape({kv_heads, groups * queries, keys})), v)
      .view(shape({kv_heads * groups, queries, dim}));
}

torch::Tensor future_keys(int64_t queries, int64_t keys, const torch::Device& device) {
  return torch::ones({queries, keys}, torch::TensorOptions().dtype(torch::kBool).device(device))
      .triu(keys - queries + 1);
}

}  // namespace topotrain::model
