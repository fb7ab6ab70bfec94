#include "topotrain/data/unicode_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <memory>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/data/unicode_classes.h"

namespace topotrain::data {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

struct MatchDataFree {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

UnicodeRegex::UnicodeRegex(const std::string& pattern, const std::string& origin) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  const auto compile = [&](const std::string& text) {
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), PCRE2_UTF | PCRE2_UCP, &error,
                         &error_offset, nullptr);
  };
  code_ = compile(with_reference_unicode_classes(pattern));
  if (!code_) {
    // The rewriting only replaces valid escapes, so the pattern as given usually fails too:
    // then the error and its offset are those of the text the user wrote.
    const int rewritten_error = error;
    if (pcre2_code* original = compile(pattern)) {
      pcre2_code_free(original);
      throw ConfigError(cat(origin, ": the regex ", pattern,
                            " does not compile once its Unicode classes are written out: ",
                            pcre2_message(rewritten_error)));
    }
    throw ConfigError(cat(origin, ": the regex ", pattern, " does not compile at offset ", error_offset, ": ",
                          pcre2_message(error)));
  }
  // Without JIT (some architectures) pcre2_match interprets the pattern: slower, same result.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

UnicodeRegex::~UnicodeRegex() { pcre2_code_free(code_); }

std::vector<std::pair<size_t, size_t>> UnicodeRegex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  std::unique_ptr<pcre2_match_data, MatchDataFree> data(pcre2_match_data_create_from_pattern(code_, nullptr));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // PCRE2 validates the whole subject on every call unless told not to: once is enough.
  uint32_t options = 0;
  size_t at = 0;
  while (at <= text.size()) {
    const int rc = pcre2_match(code_, subject, text.size(), at, options, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
        throw std::runtime_error(cat("text is not valid UTF-8 at byte ", pcre2_get_startchar(data.get()),
                                     " (", pcre2_message(rc), "); convert it to UTF-8, e.g. with iconv"));
      }
      throw std::runtime_error(cat("regex match failed: ", pcre2_message(rc)));
    }
    options = PCRE2_NO_UTF_CHECK;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {
      // An empty match must not stall the scan: step over one UTF-8 character.
      if (end >= text.size()) break;
      do ++end; while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80);
      at = end;
      continue;
    }
    matches.emplace_back(begin, end);
    at = end;
  }
  return matches;
}

std::string regex_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace topotrain::data
