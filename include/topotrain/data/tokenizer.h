// What topotrain-prepare needs from a tokenizer. encode() and encode_with_spans() are const
// and thread-safe: the preparation workers share one instance.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace topotrain::data {

// Bytes [begin, end) of a text: the ones a token stands for, or a stretch of a rendered chat.
struct ByteRange {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const ByteRange& o) const { return begin == o.begin && end == o.end; }
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Appends the ids of `text` to `out`.
  virtual void encode(std::string_view text, std::vector<uint32_t>& out) const = 0;
  // Encodes a rendered chat conversation: special-token strings written in `text` are
  // matched as tokens (as HF does for added tokens), and each id's bytes of `text` are
  // appended to `spans`. Where a normalizer rewrote the text a token's span may be wider
  // than its own characters (the whole stretch the normalizer rewrote), never narrower.
  virtual void encode_with_spans(std::string_view text, std::vector<uint32_t>& ids,
                                 std::vector<ByteRange>& spans) const = 0;
  // The id of a special token such as "<|im_start|>", if the tokenizer has it.
  virtual std::optional<uint32_t> special_token(const std::string& content) const = 0;
  virtual uint64_t vocab_size() const = 0;  // 1 + the largest id encode() can produce
  virtual uint32_t eos_id() const = 0;      // appended to every plain-text document
  // The ids HF's encode(add_special_tokens=True) puts before a text (Llama 3's BOS; none for
  // Qwen and the byte tokenizer): every plain-text document starts with them. A rendered
  // chat writes its own, as apply_chat_template tokenizes with add_special_tokens=False.
  virtual std::vector<uint32_t> document_prefix() const { return {}; }
  virtual std::string description() const = 0;  // the dataset's `tokenizer` attribute
};

// "byte" -> the built-in byte tokenizer; otherwise the path of a HF tokenizer.json whose
// end-of-document token is `eos` (empty: "<|endoftext|>"). ConfigError for an `eos` the
// tokenizer lacks; the byte tokenizer's is always <|endoftext|>, so it takes no other.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const std::string& eos);

}  // namespace topotrain::data
