#include "topotrain/data/sample_order.h"

#include <numeric>

namespace topotrain::data {
namespace {

// splitmix64: a well-mixed 64-bit stream from any seed, including 0.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) without modulo bias (Lemire's multiply-and-reject).
  uint64_t below(uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = -bound % bound;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }
};

}  // namespace

std::vector<uint64_t> epoch_permutation(uint64_t seed, uint64_t epoch, uint64_t num_samples, bool shuffle) {
  std::vector<uint64_t> order(num_samples);
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (!shuffle) return order;
  SplitMix64 seeder{seed};
  SplitMix64 rng{seeder.next() ^ (epoch * 0xD1B54A32D192ED03ULL)};
  for (uint64_t i = num_samples; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

}  // namespace topotrain::data
