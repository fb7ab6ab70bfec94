// What topotrain-prepare needs from a tokenizer. encode() is const and thread-safe: the
// preparation workers share one instance.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace topotrain::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Appends the ids of `text` to `out`.
  virtual void encode(std::string_view text, std::vector<uint32_t>& out) const = 0;
  // The id of a special token such as "<|im_start|>", if the tokenizer has it.
  virtual std::optional<uint32_t> special_token(const std::string& content) const = 0;
  virtual uint64_t vocab_size() const = 0;  // 1 + the largest id encode() can produce
  virtual uint32_t eos_id() const = 0;      // appended to every plain-text document
  virtual std::string description() const = 0;  // the dataset's `tokenizer` attribute
};

// "byte" -> the built-in byte tokenizer; otherwise the path of a HF tokenizer.json whose
// end-of-document token is `eos` (empty: "<|endoftext|>").
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const std::string& eos);

}  // namespace topotrain::data
