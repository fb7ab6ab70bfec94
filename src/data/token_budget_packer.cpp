#include "topotrain/data/token_budget_packer.h"

#include <algorithm>
#include <cstring>

#include "topotrain/core/error.h"
#include "topotrain/data/sample_order.h"

namespace topotrain::data {

LongSamplePolicy parse_long_sample_policy(const std::string& text) {
  if (text == "split") return LongSamplePolicy::split;
  if (text == "truncate") return LongSamplePolicy::truncate;
  throw ConfigError(cat("data.long_samples = \"", text, "\" is not known; use \"split\" or \"truncate\""));
}

uint64_t stream_size(uint64_t num_samples, const SampleStream& stream) {
  return stream.index < num_samples ? (num_samples - stream.index + stream.count - 1) / stream.count : 0;
}

double mean_attention_context(const TokenDataset& dataset, uint64_t token_budget, LongSamplePolicy long_samples) {
  const uint64_t b = std::max<uint64_t>(1, token_budget);
  const double budget = static_cast<double>(b);
  double squares = 0, tokens = 0;
  for (uint64_t i = 0; i < dataset.num_samples(); ++i) {
    const uint64_t length = dataset.sample_length(i);
    if (length >= b && long_samples == LongSamplePolicy::truncate) {
      squares += budget * budget, tokens += budget;
      continue;
    }
    const double whole = static_cast<double>(length / b), rest = static_cast<double>(length % b);
    squares += whole * budget * budget + rest * rest;
    tokens += static_cast<double>(length);
  }
  return tokens > 0 ? squares / tokens : 0.0;
}

TokenBudgetPacker::TokenBudgetPacker(std::shared_ptr<const TokenDataset> dataset, PackerConfig config,
                                     DataPosition start)
    : dataset_(std::move(dataset)), config_(config), position_(start) {
  // cu_seqlens is int32 (what varlen attention kernels take).
  if (config_.token_budget == 0 || config_.token_budget > uint64_t{INT32_MAX}) {
    throw ConfigError(cat("train.token_budget = ", config_.token_budget, " is out of range; use 1 .. 2^31 - 1"));
  }
  if (config_.pin_memory && !torch::cuda::is_available()) {
    throw ConfigError("pinned batches need a CUDA build with a GPU; leave pin_memory off on CPU runs");
  }
  const SampleStream& stream = config_.stream;
  if (stream.count == 0 || stream.index >= stream.count) {
    throw ConfigError(cat("sample stream ", stream.index, " of ", stream.count, " does not exist"));
  }
  if (stream.count > dataset_->num_samples()) {
    throw ConfigError(cat("'", dataset_->path(), "' has ", dataset_->num_samples(), " samples, fewer than the ",
                          stream.count, " streams reading it (one per target rank): use a larger dataset"));
  }
  order_ = stream_order(position_.epoch);
  const uint64_t n = order_.size();
  if (position_.consumed_samples >= n) {
    throw ConfigError(cat("the data position to resume (", position_.consumed_samples, " samples consumed in epoch ",
                          position_.epoch, ") lies beyond '", dataset_->path(), "' (", n,
                          " samples): resume with the dataset the checkpoint was trained on"));
  }
  if (position_.offset_in_sample >= dataset_->sample_length(order_[position_.consumed_samples])) {
    throw ConfigError(cat("the data position to resume (offset ", position_.offset_in_sample, " in sample ",
                          order_[position_.consumed_samples], ") lies beyond that sample of '", dataset_->path(),
                          "': resume with the dataset and train.seed the checkpoint was trained on"));
  }
}

void TokenBudgetPacker::advance_sample() {
  position_.offset_in_sample = 0;
  if (++position_.consumed_samples == order_.size()) {
    position_.consumed_samples = 0;
    ++position_.epoch;
    order_ = stream_order(position_.epoch);
  }
}

std::vector<uint64_t> TokenBudgetPacker::stream_order(uint64_t epoch) const {
  std::vector<uint64_t> order = epoch_permutation(position_.seed, epoch, dataset_->num_samples(), config_.shuffle);
  const SampleStream& stream = config_.stream;
  if (stream.count == 1) return order;
  std::vector<uint64_t> mine;
  for (uint64_t i = stream.index; i < order.size(); i += stream.count) mine.push_back(order[i]);
  return mine;
}

MicroBatchLayout TokenBudgetPacker::next_layout() {
  MicroBatchLayout layout;
  const uint64_t budget = config_.token_budget;
  const uint64_t epoch = position_.epoch;
  while (!ended() && position_.epoch == epoch && layout.num_tokens < budget) {
    const uint64_t sample = order_[position_.consumed_samples];
    const uint64_t begin = position_.offset_in_sample;
    const uint64_t length = dataset_->sample_length(sample);
    uint64_t end = length;
    if (length - begin > budget - layout.num_tokens) {
      if (layout.num_tokens > 0) break;
      end = begin + budget;
    }
    layout.pieces.push_back(Piece{sample, begin, end});
    layout.num_tokens += end - begin;
    layout.num_loss_targets += dataset_->loss_targets(sample, begin, end);
    if (end == length || config_.long_samples == LongSamplePolicy::truncate) {
      advance_sample();
    } else {
      position_.offset_in_sample = end;
    }
  }
  return layout;
}

PackedBatch TokenBudgetPacker::materialize(const MicroBatchLayout& layout) const {
  const int64_t total = static_cast<int64_t>(layout.num_tokens);
  const int64_t n = static_cast<int64_t>(layout.pieces.size());
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).pinned_memory(config_.pin_memory);
  PackedBatch batch;
  batch.tokens = torch::empty({total}, i64);
  batch.positions = torch::empty({total}, i64);
  batch.cu_seqlens = torch::empty({n + 1}, i64.dtype(torch::kInt32));
  batch.loss_mask = torch::empty({total}, i64.dtype(torch::kUInt8));
  batch.sample_ids = torch::empty({n}, i64);

  int64_t* tokens = batch.tokens.data_ptr<int64_t>();
  int64_t* positions = batch.positions.data_ptr<int64_t>();
  int32_t* cu = batch.cu_seqlens.data_ptr<int32_t>();
  uint8_t* mask = batch.loss_mask.data_ptr<uint8_t>();
  int64_t* ids = batch.sample_ids.data_ptr<int64_t>();
  const TokenDatasetContents& data = dataset_->contents();
  int64_t at = 0;
  cu[0] = 0;
  for (int64_t p = 0; p < n; ++p) {
    const Piece& piece = layout.pieces[p];
    const int64_t len = static_cast<int64_t>(piece.end - piece.begin);
    const uint64_t first = data.offsets[piece.sample] + piece.begin;
    const uint32_t* src = data.tokens.data() + first;
    for (int64_t i = 0; i < len; ++i) tokens[at + i] = src[i];
    for (int64_t i = 0; i < len; ++i) positions[at + i] = static_cast<int64_t>(piece.begin) + i;
    if (data.loss_mask.empty()) {
      std::memset(mask + at, 1, static_cast<size_t>(len));
    } else {
      std::memcpy(mask + at, data.loss_mask.data() + first, static_cast<size_t>(len));
    }
    ids[p] = static_cast<int64_t>(piece.sample);
    at += len;
    cu[p + 1] = static_cast<int32_t>(at);
  }
  batch.summarize();
  return batch;
}

}  // namespace topotrain::data
