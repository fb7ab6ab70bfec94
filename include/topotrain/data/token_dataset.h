// A tokenized dataset held entirely in memory.
//
// File format (HDF5), also writable from Python with h5py (docs/data.md shows how):
//   /tokens     uint32 [N]          every document's tokens, back to back (chunked)
//   /offsets    uint64 [docs + 1]   document d is tokens[offsets[d], offsets[d+1])
//   /loss_mask  uint8  [N]          optional; 1 where the token is trained on
//   attributes  vocab_size (int), eos_id (int), tokenizer (string), tokens_crc32c (int, optional:
//               the CRC-32C of /tokens as little-endian uint32, which topotrain-prepare stores)
//   /tokens_chunk_crc32c  uint32 [chunks]  optional: the CRC-32C of every chunk_tokens tokens (its
//               attribute; the last chunk shorter), stored by topotrain-prepare to say where
//               tokens that do not match tokens_crc32c differ
//   /tokenizer_files/<name>  uint8 [bytes]  optional: the Hugging Face tokenizer's files the
//               tokens were made with (data/tokenizer_files.h), stored by topotrain-prepare
//
// The whole file is read once at start: seed 004 lost half of every step to per-sample
// file reads, so sample access here is a pointer and a length, never I/O.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "topotrain/data/tokenizer_files.h"

namespace topotrain::data {

// The in-memory contents; also what write_token_dataset takes.
struct TokenDatasetContents {
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> offsets{0};  // docs + 1 entries, offsets[0] == 0
  std::vector<uint8_t> loss_mask;    // empty, or one entry per token
  uint64_t vocab_size = 0;
  uint64_t eos_id = 0;
  std::string tokenizer;
  // The CRC-32C of the tokens of the file these contents were loaded from: all of its tokens,
  // also after a held-out split took documents away, so that it names the file's contents
  // (a resume on a file that changed is refused). Unset for contents built in memory.
  std::optional<uint32_t> file_tokens_crc32c;
  double file_tokens_crc32c_seconds = 0;    // what computing it from the tokens at load took
  bool file_tokens_crc32c_verified = false;  // the file stored it, and its tokens match
};

// One sample: a view into the dataset's memory.
struct SampleView {
  const uint32_t* tokens;
  const uint8_t* loss_mask;  // nullptr when the dataset has no loss mask (all ones)
  uint64_t length;
};

// What a dataset file says of itself in its root attributes.
struct TokenDatasetHeader {
  uint64_t vocab_size = 0;
  uint64_t eos_id = 0;
  std::string tokenizer;
  uint64_t num_tokens = 0;  // entries of /tokens
};

class TokenDataset {
 public:
  // The root attributes only, without reading the tokens: what a run checks against its
  // model before any rank loads the data. ConfigError as load's.
  static TokenDatasetHeader read_header(const std::string& path);
  // The tokenizer files the file stores (empty when it stores none: a byte-tokenized file,
  // one written by h5py or by a topotrain older than these files). ConfigError as load's.
  static TokenizerFiles stored_tokenizer_files(const std::string& path);
  // Reads and validates the file. Every error (ConfigError) names the file, what is wrong
  // (with the offending index) and how to fix it. The tokens' checksum is computed from the
  // tokens read, the time that took kept in the contents; a file storing tokens_crc32c (as
  // topotrain-prepare writes it) whose tokens do not match it is refused, naming the chunks that
  // differ where the file stores per-chunk checksums. A file with no next-token target
  // (num_loss_targets() == 0) is refused too: a run on it would train nothing at loss 0.
  static TokenDataset load(const std::string& path);
  // Validates contents built in memory; `origin` names them in error messages.
  static TokenDataset from_contents(TokenDatasetContents contents, const std::string& origin);

  uint64_t num_samples() const { return contents_.offsets.size() - 1; }
  uint64_t num_tokens() const { return contents_.tokens.size(); }
  bool has_loss_mask() const { return !contents_.loss_mask.empty(); }
  uint64_t vocab_size() const { return contents_.vocab_size; }
  uint64_t eos_id() const { return contents_.eos_id; }
  const std::string& tokenizer() const { return contents_.tokenizer; }
  const std::optional<uint32_t>& file_tokens_crc32c() const { return contents_.file_tokens_crc32c; }
  const std::string& path() const { return path_; }

  uint64_t sample_length(uint64_t i) const {
    return contents_.offsets[i + 1] - contents_.offsets[i];
  }
  SampleView sample(uint64_t i) const;
  // Tokens with loss mask 1 in [begin, end) of sample i: O(1) for a whole sample, so that
  // laying out another rank's micro-batches does not read their masks.
  uint64_t loss_tokens(uint64_t i, uint64_t begin, uint64_t end) const;
  // Next-token targets the loss trains on in the piece [begin, end) of sample i: tokens
  // with loss mask 1 after the piece's first one (which nothing in the piece predicts).
  // O(1) for a whole sample, like loss_tokens.
  uint64_t loss_targets(uint64_t i, uint64_t begin, uint64_t end) const;
  // loss_targets of every whole sample, summed.
  uint64_t num_loss_targets() const { return loss_targets_; }
  // Throws the ConfigError of load() when num_loss_targets() is 0, naming path().
  void require_loss_targets() const;
  const TokenDatasetContents& contents() const { return contents_; }
  // Hands the contents over without a copy (a split rebuilds datasets from them).
  TokenDatasetContents release_contents() && { return std::move(contents_); }

 private:
  TokenDatasetContents contents_;
  std::vector<uint64_t> sample_loss_tokens_;  // per sample; empty without a loss mask
  uint64_t loss_targets_ = 0;
  std::string path_;
};

struct WriteOptions {
  uint64_t chunk_tokens = 1 << 16;  // HDF5 chunk length of /tokens and /loss_mask
  int gzip_level = 0;               // 0: no compression; 1..9: deflate
};

// Appends documents to a new dataset file without holding it all in memory. The file is
// written under "<path>.tmp" and renamed by finish(), so a crash never leaves a file that
// looks complete. /loss_mask is created only when the first token with mask 0 arrives
// (backfilled with ones): plain-text corpora do not pay a byte per token for it.
class TokenDatasetWriter {
 public:
  TokenDatasetWriter(const std::string& path, uint64_t vocab_size, uint64_t eos_id,
                     const std::string& tokenizer, WriteOptions options = {});
  ~TokenDatasetWriter();
  TokenDatasetWriter(const TokenDatasetWriter&) = delete;
  TokenDatasetWriter& operator=(const TokenDatasetWriter&) = delete;

  // Appends documents given as concatenated tokens with their lengths; loss_mask is
  // empty (all ones) or one entry per token.
  void append(const std::vector<uint32_t>& tokens, const std::vector<uint64_t>& lengths,
              const std::vector<uint8_t>& loss_mask);
  // Stored by finish() under /tokenizer_files.
  void set_tokenizer_files(TokenizerFiles files);
  void finish();

  uint64_t num_tokens() const { return tokens_written_; }
  uint64_t num_documents() const { return offsets_.size() - 1; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<uint64_t> offsets_{0};
  uint64_t tokens_written_ = 0;
};

// Why data of `documents` documents, `tokens` tokens and `loss_tokens` tokens with loss mask
// 1 has nothing to train on, as "no token with loss_mask 1 that follows ...: nothing to
// train on (...)": the dataset's loader and topotrain-prepare refuse such data in one wording.
std::string no_loss_targets_reason(uint64_t documents, uint64_t tokens, uint64_t loss_tokens);

// Writes a whole dataset at once (tests, small tools).
void write_token_dataset(const std::string& path, const TokenDatasetContents& contents,
                         WriteOptions options = {});

}  // namespace topotrain::data
