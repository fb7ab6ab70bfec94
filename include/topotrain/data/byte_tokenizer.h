// The built-in tokenizer: one id per byte (0..255) plus the specials a chat corpus needs.
// encode() never searches text for special-token strings: every byte of a document is
// data. encode_with_spans(), for rendered chat, matches the three specials' strings.
#pragma once

#include "topotrain/data/tokenizer.h"

namespace topotrain::data {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr uint32_t kEndOfText = 256;  // "<|endoftext|>", the eos
  static constexpr uint32_t kImStart = 257;    // "<|im_start|>"
  static constexpr uint32_t kImEnd = 258;      // "<|im_end|>"
  static constexpr uint64_t kVocabSize = 259;

  void encode(std::string_view text, std::vector<uint32_t>& out) const override;
  void encode_with_spans(std::string_view text, std::vector<uint32_t>& ids,
                         std::vector<ByteRange>& spans) const override;
  std::optional<uint32_t> special_token(const std::string& content) const override;
  uint64_t vocab_size() const override { return kVocabSize; }
  uint32_t eos_id() const override { return kEndOfText; }
  std::string description() const override { return "byte"; }
};

}  // namespace topotrain::data
