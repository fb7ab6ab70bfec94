// The Unicode normalizers a HF tokenizer.json declares ("normalizer": NFC, NFD, NFKC, NFKD,
// or a Sequence of them, applied in order), applied as the HF tokenizer applies them: to the
// text between added tokens, before the pre-tokenizer. utf8proc does the work (Debian 12's
// 2.8: Unicode 15.0, the tables HF tokenizers' unicode-normalization crate also follows).
// Other normalizer kinds are refused when the tokenizer loads (bpe_tokenizer.cpp).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace topotrain::data {

enum class NormalForm { nfc, nfd, nfkc, nfkd };

// "NFC" -> NormalForm::nfc and so on; false for any other name.
bool parse_normal_form(const std::string& name, NormalForm& form);

class UnicodeNormalizer {
 public:
  UnicodeNormalizer() = default;  // no normalizer: text passes as it is
  explicit UnicodeNormalizer(std::vector<NormalForm> forms) : forms_(std::move(forms)) {}

  // False when apply() would return `text` as it is without looking it up: no forms, or
  // ASCII text, which every form leaves alone (what keeps tokenizing English at full speed).
  bool may_change(std::string_view text) const;
  // `text` in each form in turn. Throws std::runtime_error("text is not valid UTF-8 ...")
  // for invalid input, as the pre-tokenizer's regex does.
  std::string apply(std::string_view text) const;
  // apply(), and for each byte of the result the bytes [first, second) of `text` it comes
  // from. The text is normalized in stretches that each begin at an ASCII character, which
  // no form composes with what precedes it, reorders or rewrites: an ASCII byte maps to
  // itself, a run of other characters to the run (with the ASCII character before it where
  // the two combine, as "e" and a combining accent do).
  std::string apply_aligned(std::string_view text, std::vector<std::pair<size_t, size_t>>& source) const;

 private:
  std::vector<NormalForm> forms_;
};

}  // namespace topotrain::data
