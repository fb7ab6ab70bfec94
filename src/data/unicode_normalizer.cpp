#include "topotrain/data/unicode_normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "topotrain/core/error.h"

namespace topotrain::data {
namespace {

utf8proc_option_t options_of(NormalForm form) {
  // UTF8PROC_STABLE: the Unicode stability policy that NFC and friends are defined with.
  switch (form) {
    case NormalForm::nfc: return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    case NormalForm::nfd: return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case NormalForm::nfkc:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case NormalForm::nfkd:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  return UTF8PROC_STABLE;
}

std::string normalized(std::string_view text, NormalForm form) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t size = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                             static_cast<utf8proc_ssize_t>(text.size()), &out, options_of(form));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (size < 0) {
    if (size == UTF8PROC_ERROR_INVALIDUTF8) {
      // Where: the first byte that does not start or continue a valid sequence.
      std::size_t at = 0;
      while (at < text.size()) {
        utf8proc_int32_t codepoint = 0;
        const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data()) + at,
                                                    static_cast<utf8proc_ssize_t>(text.size() - at), &codepoint);
        if (n <= 0) break;
        at += static_cast<std::size_t>(n);
      }
      throw std::runtime_error(cat("text is not valid UTF-8 at byte ", at, "; convert it to UTF-8, e.g. with iconv"));
    }
    throw std::runtime_error(cat("Unicode normalization failed: ", utf8proc_errmsg(size)));
  }
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(size));
}

}  // namespace

bool parse_normal_form(const std::string& name, NormalForm& form) {
  if (name == "NFC") form = NormalForm::nfc;
  else if (name == "NFD") form = NormalForm::nfd;
  else if (name == "NFKC") form = NormalForm::nfkc;
  else if (name == "NFKD") form = NormalForm::nfkd;
  else return false;
  return true;
}

bool UnicodeNormalizer::may_change(std::string_view text) const {
  return !forms_.empty() &&
         std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
}

std::string UnicodeNormalizer::apply(std::string_view text) const {
  std::string out(text);
  for (NormalForm form : forms_) out = normalized(out, form);
  return out;
}

std::string UnicodeNormalizer::apply_aligned(std::string_view text,
                                             std::vector<std::pair<size_t, size_t>>& source) const {
  const auto is_ascii = [&](size_t i) { return static_cast<unsigned char>(text[i]) < 0x80; };
  std::string out;
  source.clear();
  const auto append = [&](const std::string& normalized, size_t begin, size_t end) {
    out += normalized;
    source.resize(out.size(), {begin, end});
  };
  size_t at = 0;
  while (at < text.size()) {
    size_t next = at + 1;
    while (next < text.size() && !is_ascii(next)) ++next;
    const std::string stretch = apply(text.substr(at, next - at));
    if (is_ascii(at) && next > at + 1) {
      const std::string run = apply(text.substr(at + 1, next - at - 1));
      if (stretch.size() == run.size() + 1 && stretch[0] == text[at] && stretch.compare(1, run.size(), run) == 0) {
        append(std::string(1, text[at]), at, at + 1);
        append(run, at + 1, next);
        at = next;
        continue;
      }
    }
    append(stretch, at, next);
    at = next;
  }
  return out;
}

}  // namespace topotrain::data
