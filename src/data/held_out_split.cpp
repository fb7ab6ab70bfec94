#include "topotrain/data/held_out_split.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "topotrain/core/error.h"
#include "topotrain/data/sample_order.h"

namespace topotrain::data {
namespace {

// The permutation's epoch argument for the split: no training epoch reaches it, so the
// held-out draw is not the first epoch's order.
constexpr std::uint64_t kHeldOutDraw = std::numeric_limits<std::uint64_t>::max();

}  // namespace

HeldOutSplit split_held_out(TokenDataset dataset, double fraction, std::uint64_t seed) {
  const std::uint64_t documents = dataset.num_samples();
  const std::string origin = dataset.path();
  const auto wanted = static_cast<std::uint64_t>(std::llround(fraction * static_cast<double>(documents)));
  const std::uint64_t count = std::max<std::uint64_t>(1, wanted);
  if (documents < 2 || count >= documents)
    throw ConfigError(cat("data.eval_fraction = ", fraction, " would hold out ", count, " of the ", documents,
                          " documents of ", origin, ", leaving none to train on: use a smaller fraction, or a "
                          "separate file in data.eval_path"));
  std::vector<std::uint64_t> order = epoch_permutation(seed, kHeldOutDraw, documents, /*shuffle=*/true);
  std::vector<bool> held(documents, false);
  for (std::uint64_t i = 0; i < count; ++i) held[order[i]] = true;
  order = {};

  TokenDatasetContents all = std::move(dataset).release_contents();
  const bool masked = !all.loss_mask.empty();
  TokenDatasetContents out;
  out.vocab_size = all.vocab_size;
  out.eos_id = all.eos_id;
  out.tokenizer = all.tokenizer;
  out.file_tokens_crc32c = all.file_tokens_crc32c;
  // Kept documents move down over the held-out ones; `write` never passes `begin`, so
  // each move reads tokens not yet overwritten.
  std::uint64_t write = 0;
  std::vector<std::uint64_t> kept_offsets{0};
  for (std::uint64_t d = 0; d < documents; ++d) {
    const std::uint64_t begin = all.offsets[d], length = all.offsets[d + 1] - begin;
    if (held[d]) {
      out.tokens.insert(out.tokens.end(), all.tokens.begin() + begin, all.tokens.begin() + begin + length);
      if (masked) out.loss_mask.insert(out.loss_mask.end(), all.loss_mask.begin() + begin,
                                       all.loss_mask.begin() + begin + length);
      out.offsets.push_back(out.tokens.size());
      continue;
    }
    if (write != begin) {
      std::memmove(all.tokens.data() + write, all.tokens.data() + begin, length * sizeof(all.tokens[0]));
      if (masked) std::memmove(all.loss_mask.data() + write, all.loss_mask.data() + begin, length);
    }
    write += length;
    kept_offsets.push_back(write);
  }
  all.tokens.resize(write);
  all.tokens.shrink_to_fit();
  if (masked) {
    all.loss_mask.resize(write);
    all.loss_mask.shrink_to_fit();
  }
  all.offsets = std::move(kept_offsets);
  HeldOutSplit split{TokenDataset::from_contents(std::move(all), origin),
                     TokenDataset::from_contents(std::move(out), cat(origin, " (held out: data.eval_fraction)"))};
  if (split.train.num_loss_targets() == 0)
    throw ConfigError(cat("data.eval_fraction = ", fraction, " holds out every document of ", origin,
                          " that has a token with loss_mask 1 after another token of its document, leaving nothing "
                          "to train on: use a smaller fraction, or a separate file in data.eval_path"));
  return split;
}

}  // namespace topotrain::data
