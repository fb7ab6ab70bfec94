// HF tokenizer.json byte-level BPE (the GPT-2 / Qwen kind).
//
// encode(text): added tokens (e.g. "<|im_end|>") are matched first, longest first; the
// rest is normalized (the declared NFC, NFD, NFKC, NFKD or Sequence of them:
// unicode_normalizer.h) and cut by the pre-tokenizer regexes (Split "Isolated" patterns, then ByteLevel's
// GPT-2 pattern when its use_regex is true); each piece's bytes are mapped to the
// byte-to-unicode alphabet and merged by merge rank (lowest first, all non-overlapping
// occurrences left to right) into vocabulary ids. encode_with_spans() does the same and
// places each id on the bytes it spells (its vocabulary string's length in the alphabet),
// mapped back through the normalizer's alignment where the normalizer changed the text.
// `ignore_merges` (Llama 3's) is honoured: a piece that is one vocabulary entry is that id.
// document_prefix(): the ids the post-processor's TemplateProcessing puts before $A in its
// "single" template (Llama 3's <|begin_of_text|>); a ByteLevel post-processor adds none.
// Not supported (load fails naming the key): other models than BPE, add_prefix_space,
// subword prefixes/suffixes, byte_fallback, BPE dropout, other normalizers (Lowercase,
// Replace, Strip, ...), other post-processors (Roberta, Bert, ...) and tokens after $A,
// added tokens with lstrip, rstrip or single_word. Added tokens are matched in the text as
// given (HF's `normalized: false`, what Qwen's and Llama 3's are).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "topotrain/data/tokenizer.h"
#include "topotrain/data/unicode_normalizer.h"
#include "topotrain/data/unicode_regex.h"

namespace topotrain::data {

class BpeTokenizer : public Tokenizer {
 public:
  // eos: the content of the end-of-document token.
  static std::unique_ptr<BpeTokenizer> load(const std::string& path, const std::string& eos);

  void encode(std::string_view text, std::vector<uint32_t>& out) const override;
  void encode_with_spans(std::string_view text, std::vector<uint32_t>& ids,
                         std::vector<ByteRange>& spans) const override;
  std::optional<uint32_t> special_token(const std::string& content) const override;
  uint64_t vocab_size() const override { return vocab_size_; }
  uint32_t eos_id() const override { return eos_id_; }
  std::vector<uint32_t> document_prefix() const override { return document_prefix_; }
  std::string description() const override { return "bpe:" + path_; }

 private:
  BpeTokenizer() = default;
  void read_post_processor(const std::vector<nlohmann::json>& steps);
  // spans: null when the caller wants ids only.
  void encode_added_and_ordinary(std::string_view text, std::vector<uint32_t>& out,
                                 std::vector<ByteRange>* spans) const;
  void encode_ordinary(std::string_view text, size_t offset, std::vector<uint32_t>& out,
                       std::vector<ByteRange>* spans) const;
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;
  void merge_piece(std::string_view piece, std::vector<uint32_t>& symbols) const;

  struct Merge {
    uint32_t rank;
    uint32_t merged;
  };
  std::string path_;
  uint64_t serial_ = 0;  // tells this tokenizer's entries in the per-thread piece cache apart
  std::unordered_map<std::string, uint32_t> vocab_;
  std::vector<uint32_t> byte_length_;  // by vocabulary id: how many bytes of text it spells
  std::unordered_map<uint64_t, Merge> merges_;  // key: left id << 32 | right id
  int64_t byte_ids_[256];                       // id of each byte's alphabet character, -1 if none
  std::unordered_map<std::string, uint32_t> added_;
  std::unique_ptr<UnicodeRegex> added_pattern_;
  UnicodeNormalizer normalizer_;
  std::vector<std::unique_ptr<UnicodeRegex>> split_patterns_;
  bool ignore_merges_ = false;
  std::vector<uint32_t> document_prefix_;
  uint64_t vocab_size_ = 0;
  uint32_t eos_id_ = 0;
};

}  // namespace topotrain::data
