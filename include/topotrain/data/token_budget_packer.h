// Walks the global sample stream and cuts it into micro-batches of at most token_budget
// tokens.
//
// Rule, applied to the samples in epoch-permutation order:
//   * the next sample (or the rest of a split one) joins the micro-batch when it fits;
//   * when it does not fit and the micro-batch already holds tokens, the micro-batch ends
//     (it may hold fewer than token_budget tokens; there is never padding);
//   * when it does not fit an empty micro-batch (longer than token_budget), its first
//     token_budget tokens fill the micro-batch alone: `split` keeps the rest for the next
//     micro-batch (positions continue), `truncate` drops the rest.
// The stream is defined by samples, so the position after any micro-batch can be resumed
// with another token_budget: nothing is skipped or repeated. A micro-batch never crosses an
// epoch boundary: the last one of an epoch may be short, so that "epochs = passes over the
// data" holds exactly and no micro-batch holds a sample twice. From PackerConfig::end_epoch
// on the stream has ended: every layout is empty.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "topotrain/data/data_position.h"
#include "topotrain/batch/packed_batch.h"
#include "topotrain/data/token_dataset.h"

namespace topotrain::data {

enum class LongSamplePolicy { split, truncate };

LongSamplePolicy parse_long_sample_policy(const std::string& text);  // ConfigError on other text

// Independent streams (one per pipeline stage that reads data at its own pace): stream i
// of n visits entries i, i + n, i + 2n, ... of each epoch's permutation, so the n streams
// together visit every sample once per epoch, and each has its own DataPosition
// (consumed_samples counts that stream's entries) that resumes exactly on its own.
struct SampleStream {
  uint64_t index = 0;
  uint64_t count = 1;
};

// Samples per epoch of `stream` over a dataset of `num_samples`.
uint64_t stream_size(uint64_t num_samples, const SampleStream& stream);

// The length L for which a token's mean causal context, L / 2, is that of this dataset cut
// into pieces as the packer cuts it (a sample longer than token_budget: pieces of token_budget
// and the rest, or its first token_budget tokens): sum(piece^2) / sum(piece). What attention's
// FLOPs per token go by; the mean sample length underestimates it whenever lengths vary.
double mean_attention_context(const TokenDataset& dataset, uint64_t token_budget, LongSamplePolicy long_samples);

struct PackerConfig {
  uint64_t token_budget = 0;
  LongSamplePolicy long_samples = LongSamplePolicy::split;
  bool shuffle = true;      // false: every epoch visits samples in file order
  bool pin_memory = false;  // allocate batches in page-locked memory (CUDA builds only)
  SampleStream stream;
  // The epoch at which the stream ends (train.epochs): from there on next_layout() returns
  // empty layouts. 0: it never ends, epochs follow each other (train.max_tokens decides).
  uint64_t end_epoch = 0;
};

// A token range [begin, end) of one sample.
struct Piece {
  uint64_t sample;
  uint64_t begin;
  uint64_t end;
};

// Which pieces form a micro-batch: cheap to compute, so every rank lays out all of a
// step's micro-batches and materializes only its own.
struct MicroBatchLayout {
  std::vector<Piece> pieces;
  uint64_t num_tokens = 0;
  uint64_t num_loss_targets = 0;  // TokenDataset::loss_targets summed over the pieces
};

class TokenBudgetPacker {
 public:
  TokenBudgetPacker(std::shared_ptr<const TokenDataset> dataset, PackerConfig config, DataPosition start);

  MicroBatchLayout next_layout();  // advances position(); empty once the stream has ended
  bool ended() const { return config_.end_epoch > 0 && position_.epoch >= config_.end_epoch; }
  PackedBatch materialize(const MicroBatchLayout& layout) const;
  PackedBatch next() { return materialize(next_layout()); }

  const DataPosition& position() const { return position_; }
  const PackerConfig& config() const { return config_; }
  const TokenDataset& dataset() const { return *dataset_; }

 private:
  void advance_sample();
  std::vector<uint64_t> stream_order(uint64_t epoch) const;  // this stream's share of the epoch's permutation

  std::shared_ptr<const TokenDataset> dataset_;
  PackerConfig config_;
  DataPosition position_;
  std::vector<uint64_t> order_;  // permutation of position_.epoch
};

}  // namespace topotrain::data
