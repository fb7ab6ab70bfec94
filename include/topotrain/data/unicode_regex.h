// A compiled PCRE2 pattern in UTF mode with Unicode properties, JIT-compiled when available.
// \p{L}, \p{N} and \s (and their negations) are the classes HF's tokenizer gives them
// (unicode_classes.h); other properties are PCRE2's own.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace topotrain::data {

class UnicodeRegex {
 public:
  // `origin` names where the pattern comes from in error messages.
  UnicodeRegex(const std::string& pattern, const std::string& origin);
  ~UnicodeRegex();
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  // Every non-overlapping match [begin, end) of `text`, left to right. Throws
  // std::runtime_error("... not valid UTF-8 at byte N") for invalid input.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
};

// `text` with every regex metacharacter escaped, for matching it literally.
std::string regex_escape(const std::string& text);

}  // namespace topotrain::data
