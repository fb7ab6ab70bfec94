// One packed micro-batch: the tokens of n sequences in one row of T tokens, no padding, the
// sequence boundaries in cu_seqlens. The one batch type from the packer (data/) through the
// models (model/) to the hidden-state link (comm/); header-only (CMake target topotrain_batch)
// and below all three, so that none of them depends on another for it. A sequence is a
// sample, or a piece of one when the packer splits a long sample.
//
// Tensor fields, each 1-D and contiguous, all on one device:
//   tokens      int64 [T]      token ids
//   positions   int64 [T]      position in the sample: 0 at a sample's first token; the later
//                              piece of a split sample continues where the earlier one stopped
//   cu_seqlens  int32 [n + 1]  0, end of sequence 0, ..., T; strictly increasing
//   loss_mask   uint8 [T]      1 = a token trained on as a next-token target (DFlash: anchors
//                              only there). Optional: undefined means all ones
//   sample_ids  int64 [n]      the dataset index of each sequence. Optional
// The packer and the hidden-state link always set every one. kPackedBatchFields below lists
// them with their dtype and length, and whatever moves, sends or checks a batch walks that
// list: a new per-token field is one member plus one row there.
//
// Host fields summarise the tensors on the host, because kernels take them as numbers and
// reading them from a GPU tensor would stall the stream. summarize() derives all of them
// from CPU tensors (the link sends none of them; its receiver summarizes):
//   max_seqlen        longest sequence
//   sequence_lengths  every sequence's length (attention lays the sequences out by them)
//   num_loss_targets  tokens with loss mask 1 that are not their sequence's first token: the
//                     next-token targets the LM loss trains on
//
// The empty batch (T = 0, n = 0, cu_seqlens = {0}) is what the packer makes once its stream
// has ended within a step; trainers skip it, and check() refuses it.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "topotrain/core/error.h"

namespace topotrain {

struct PackedBatch {
  at::Tensor tokens;
  at::Tensor positions;
  at::Tensor cu_seqlens;
  at::Tensor loss_mask;
  at::Tensor sample_ids;
  std::int64_t max_seqlen = 0;
  std::vector<std::int64_t> sequence_lengths;
  std::int64_t num_loss_targets = 0;

  std::int64_t num_tokens() const { return tokens.defined() ? tokens.numel() : 0; }
  std::int64_t num_sequences() const { return cu_seqlens.defined() ? cu_seqlens.numel() - 1 : 0; }

  // A CPU batch of whole documents (positions from 0, loss mask all ones, sample ids 0..n-1),
  // summarized; throws std::invalid_argument for an empty document.
  static PackedBatch from_documents(const std::vector<std::vector<std::int64_t>>& documents);
  // The batch with every defined tensor on `device` (non_blocking: from pinned memory, ordered
  // on the current stream); the host fields come along as they are.
  PackedBatch to(const at::Device& device, bool non_blocking = false) const;
  // Sets the host fields from cu_seqlens and loss_mask, which must be on the CPU; throws
  // std::invalid_argument when cu_seqlens does not run from 0 up to T.
  void summarize();
  // The contract above for a batch of at least one sequence (what the models take): dtypes,
  // lengths, the host fields against the tensors, and, on CPU tensors, cu_seqlens itself.
  // num_loss_targets is not checked here (that would read a GPU loss mask back); the LM
  // loss sizes its target rows by it, and checks it where the mask is on the CPU.
  // Throws std::invalid_argument saying what is wrong.
  void check() const;
};

// How long a tensor field is, in terms of the batch's T tokens and n sequences.
enum class FieldLength { tokens, sequences, sequence_bounds };  // T, n, n + 1

inline std::int64_t field_length(FieldLength length, std::int64_t tokens, std::int64_t sequences) {
  switch (length) {
    case FieldLength::tokens: return tokens;
    case FieldLength::sequences: return sequences;
    case FieldLength::sequence_bounds: return sequences + 1;
  }
  return 0;
}

inline const char* field_length_name(FieldLength length) {
  switch (length) {
    case FieldLength::tokens: return "T";
    case FieldLength::sequences: return "n";
    case FieldLength::sequence_bounds: return "n + 1";
  }
  return "?";
}

struct PackedBatchField {
  const char* name;
  at::Tensor PackedBatch::*member;
  at::ScalarType dtype;
  FieldLength length;
  bool optional;  // may be undefined in a batch made by hand (see the top of this file)
};

// Every tensor member of PackedBatch, once (tests/batch checks that none is missing).
inline constexpr PackedBatchField kPackedBatchFields[] = {
    {"tokens", &PackedBatch::tokens, at::kLong, FieldLength::tokens, false},
    {"positions", &PackedBatch::positions, at::kLong, FieldLength::tokens, false},
    {"cu_seqlens", &PackedBatch::cu_seqlens, at::kInt, FieldLength::sequence_bounds, false},
    {"loss_mask", &PackedBatch::loss_mask, at::kByte, FieldLength::tokens, true},
    {"sample_ids", &PackedBatch::sample_ids, at::kLong, FieldLength::sequences, true},
};

inline PackedBatch PackedBatch::from_documents(const std::vector<std::vector<std::int64_t>>& documents) {
  const auto n = static_cast<std::int64_t>(documents.size());
  std::int64_t total = 0;
  for (std::int64_t d = 0; d < n; ++d) {
    const auto length = static_cast<std::int64_t>(documents[d].size());
    if (length == 0) throw std::invalid_argument(cat("packed batch: document ", d, " is empty"));
    total += length;
  }
  PackedBatch b;
  b.tokens = at::empty({total}, at::kLong);
  b.positions = at::empty({total}, at::kLong);
  b.cu_seqlens = at::empty({n + 1}, at::kInt);
  b.loss_mask = at::ones({total}, at::kByte);
  b.sample_ids = at::arange(n, at::kLong);
  std::int64_t* tokens = b.tokens.data_ptr<std::int64_t>();
  std::int64_t* positions = b.positions.data_ptr<std::int64_t>();
  std::int32_t* cu = b.cu_seqlens.data_ptr<std::int32_t>();
  std::int64_t at = 0;
  cu[0] = 0;
  for (std::int64_t d = 0; d < n; ++d) {
    const auto& doc = documents[d];
    std::memcpy(tokens + at, doc.data(), doc.size() * sizeof(std::int64_t));
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(doc.size()); ++i) positions[at + i] = i;
    at += static_cast<std::int64_t>(doc.size());
    cu[d + 1] = static_cast<std::int32_t>(at);
  }
  b.summarize();
  return b;
}

inline PackedBatch PackedBatch::to(const at::Device& device, bool non_blocking) const {
  PackedBatch out = *this;
  for (const PackedBatchField& field : kPackedBatchFields) {
    at::Tensor& t = out.*field.member;
    if (t.defined()) t = t.to(device, non_blocking);
  }
  return out;
}

inline void PackedBatch::summarize() {
  if (!cu_seqlens.defined() || !cu_seqlens.is_cpu() || (loss_mask.defined() && !loss_mask.is_cpu()))
    throw std::invalid_argument("packed batch: summarize() needs cu_seqlens and loss_mask on the CPU");
  const at::Tensor cu = cu_seqlens.to(at::kLong).contiguous();
  const std::int64_t* bounds = cu.data_ptr<std::int64_t>();
  const std::int64_t n = cu.numel() - 1, total = num_tokens();
  const at::Tensor mask = loss_mask.defined() ? loss_mask.to(at::kByte).contiguous() : at::Tensor();
  const std::uint8_t* ones = mask.defined() ? mask.data_ptr<std::uint8_t>() : nullptr;
  if (n < 0 || bounds[0] != 0 || bounds[n] != total || (ones && mask.numel() != total))
    throw std::invalid_argument(cat("packed batch: cu_seqlens must run from 0 to the token count ", total));
  max_seqlen = 0;
  num_loss_targets = 0;
  sequence_lengths.assign(static_cast<std::size_t>(n), 0);
  for (std::int64_t s = 0; s < n; ++s) {
    const std::int64_t begin = bounds[s], end = bounds[s + 1];
    if (end < begin) throw std::invalid_argument(cat("packed batch: cu_seqlens decreases after sequence ", s));
    sequence_lengths[static_cast<std::size_t>(s)] = end - begin;
    max_seqlen = std::max(max_seqlen, end - begin);
    for (std::int64_t i = begin + 1; i < end; ++i) num_loss_targets += ones ? (ones[i] != 0) : 1;
  }
}

inline void PackedBatch::check() const {
  auto fail = [](const std::string& what) { throw std::invalid_argument("packed batch: " + what); };
  if (!cu_seqlens.defined() || cu_seqlens.dim() != 1 || cu_seqlens.numel() < 2)
    fail("cu_seqlens must be int32 [n + 1] with at least one sequence");
  const std::int64_t total = num_tokens(), n = num_sequences();
  for (const PackedBatchField& field : kPackedBatchFields) {
    const at::Tensor& t = this->*field.member;
    if (!t.defined() && field.optional) continue;
    const std::int64_t want = field_length(field.length, total, n);
    if (!t.defined() || t.dim() != 1 || t.numel() != want || t.scalar_type() != field.dtype)
      fail(cat(field.name, " must be ", field.dtype, " [", field_length_name(field.length), "] (", want,
               " elements for ", total, " tokens in ", n, " sequences)"));
  }
  if (static_cast<std::int64_t>(sequence_lengths.size()) != n)
    fail(cat("sequence_lengths has ", sequence_lengths.size(), " entries for ", n, " sequences"));
  std::int64_t sum = 0, longest = 0;
  for (std::int64_t length : sequence_lengths) sum += length, longest = std::max(longest, length);
  if (sum != total || longest != max_seqlen)
    fail(cat("sequence_lengths sum to ", sum, " tokens with the longest ", longest, ", the batch has ", total,
             " tokens and max_seqlen ", max_seqlen));
  if (!cu_seqlens.is_cpu()) return;  // reading a device tensor back would synchronise
  const at::Tensor cu = cu_seqlens.contiguous();
  const std::int32_t* bounds = cu.data_ptr<std::int32_t>();
  if (bounds[0] != 0) fail("cu_seqlens[0] must be 0");
  for (std::int64_t s = 0; s < n; ++s) {
    const std::int64_t length = bounds[s + 1] - bounds[s];
    if (length <= 0) fail(cat("sequence ", s, " is empty or cu_seqlens is not increasing"));
    if (sequence_lengths[static_cast<std::size_t>(s)] != length)
      fail(cat("sequence_lengths[", s, "] is ", sequence_lengths[static_cast<std::size_t>(s)],
               " but cu_seqlens gives ", length));
  }
  if (bounds[n] != total) fail("cu_seqlens must end at the number of tokens");
}

}  // namespace topotrain
