#include "topotrain/data/unicode_classes.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iterator>
#include <stdexcept>
#include <vector>

namespace topotrain::data {
namespace {

struct AssignedSince {
  uint32_t first, last;
  char unicode_class;  // 'L', 'N' or 's'
};
constexpr AssignedSince kAssignedSinceUtf8proc[] = {
#include "unicode_classes_since_utf8proc.inc"
};

char class_letter(UnicodeClass unicode_class) {
  switch (unicode_class) {
    case UnicodeClass::letter: return 'L';
    case UnicodeClass::number: return 'N';
    case UnicodeClass::space: return 's';
  }
  return '?';
}

// Code points as the body of a PCRE2 character class: "\x{41}-\x{5A}\x{61}-\x{7A}...".
// Surrogates are never members (PCRE2 refuses them in UTF mode), which also keeps every
// range on one side of them.
std::string class_body(const std::vector<bool>& members) {
  std::string body;
  uint32_t c = 0;
  while (c < members.size()) {
    if (!members[c]) {
      ++c;
      continue;
    }
    uint32_t last = c;
    while (last + 1 < members.size() && members[last + 1]) ++last;
    char buffer[32];
    if (c == last) std::snprintf(buffer, sizeof buffer, "\\x{%X}", c);
    else std::snprintf(buffer, sizeof buffer, "\\x{%X}-\\x{%X}", c, last);
    body += buffer;
    c = last + 1;
  }
  return body;
}

// Every scalar value in order, in UTF-8.
std::string all_scalar_values() {
  std::string text(4 * 0x110000, '\0');
  size_t size = 0;
  for (uint32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    size += static_cast<size_t>(utf8proc_encode_char(static_cast<utf8proc_int32_t>(c),
                                                     reinterpret_cast<utf8proc_uint8_t*>(&text[size])));
  }
  text.resize(size);
  return text;
}

// The members of PCRE2's own `property` (compiled as it is, UTF + UCP) among the code points
// of `text`, by code point.
std::vector<bool> pcre2_members(const std::string& property, const std::string& text) {
  const std::string pattern = property + "+";
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (!code) throw std::runtime_error("this PCRE2 library has no Unicode support (" + property + " fails to compile)");
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  std::vector<bool> members(0x110000, false);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  while (pcre2_match(code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, data, nullptr) > 0) {
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    for (at = ovector[0]; at < ovector[1];) {
      utf8proc_int32_t c = 0;
      at += static_cast<size_t>(
          utf8proc_iterate(subject + at, static_cast<utf8proc_ssize_t>(ovector[1] - at), &c));
      members[static_cast<uint32_t>(c)] = true;
    }
  }
  pcre2_match_data_free(data);
  pcre2_code_free(code);
  return members;
}

// A class as PCRE2 is given it. The pattern runs fastest with PCRE2's own property (a table
// look-up, where a class of ranges is tried range by range), so where the property has no
// member outside the class, the class is the property plus the members it lacks.
struct WrittenClass {
  std::string property, negated_property;  // PCRE2's own: "\p{L}", "\P{L}"
  bool property_within = false;            // every member of `property` is in the class
  std::string lacking;                     // members `property` lacks, as a class body
  std::string members, non_members;        // all of them, as class bodies
};

WrittenClass write_class(UnicodeClass unicode_class, const std::string& property, const std::string& negated,
                         const std::string& all) {
  WrittenClass w;
  w.property = property;
  w.negated_property = negated;
  const std::vector<bool> pcre2 = pcre2_members(property, all);
  std::vector<bool> in(0x110000, false), out(0x110000, false), lacking(0x110000, false);
  w.property_within = true;
  for (uint32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    in[c] = in_unicode_class(c, unicode_class);
    out[c] = !in[c];
    lacking[c] = in[c] && !pcre2[c];
    if (pcre2[c] && !in[c]) w.property_within = false;
  }
  w.lacking = class_body(lacking);
  w.members = class_body(in);
  w.non_members = class_body(out);
  return w;
}

const WrittenClass& written_class(UnicodeClass unicode_class) {
  // Built once per process: a few passes over all code points, some tens of milliseconds.
  static const std::array<WrittenClass, 3> classes = [] {
    const std::string all = all_scalar_values();
    return std::array<WrittenClass, 3>{write_class(UnicodeClass::letter, "\\p{L}", "\\P{L}", all),
                                       write_class(UnicodeClass::number, "\\p{N}", "\\P{N}", all),
                                       write_class(UnicodeClass::space, "\\s", "\\S", all)};
  }();
  return classes[static_cast<int>(unicode_class)];
}

// The class (or, negated, its complement) in a pattern, inside brackets or on its own.
std::string class_text(UnicodeClass unicode_class, bool negated, bool in_brackets) {
  const WrittenClass& w = written_class(unicode_class);
  if (!in_brackets) {
    const std::string body = w.property_within ? w.property + w.lacking : w.members;
    return (negated ? "[^" : "[") + body + "]";
  }
  if (!negated) return w.property_within ? w.property + w.lacking : w.members;
  return w.property_within && w.lacking.empty() ? w.negated_property : w.non_members;
}

// The class an escape at `pattern[at]` ('\\') names, if it is one of ours: sets `length` to
// the escape's length and `negated` to whether it is the complement.
bool parse_class_escape(const std::string& pattern, size_t at, UnicodeClass& unicode_class, bool& negated,
                        size_t& length) {
  if (at + 1 >= pattern.size()) return false;
  const char kind = pattern[at + 1];
  if (kind == 's' || kind == 'S') {
    unicode_class = UnicodeClass::space;
    negated = kind == 'S';
    length = 2;
    return true;
  }
  if (kind != 'p' && kind != 'P') return false;
  negated = kind == 'P';
  std::string name;
  if (at + 2 < pattern.size() && pattern[at + 2] == '{') {
    const size_t close = pattern.find('}', at + 3);
    if (close == std::string::npos) return false;
    name = pattern.substr(at + 3, close - at - 3);
    length = close + 1 - at;
    if (!name.empty() && name[0] == '^') {
      negated = !negated;
      name.erase(0, 1);
    }
  } else {
    if (at + 2 >= pattern.size()) return false;
    name = pattern.substr(at + 2, 1);
    length = 3;
  }
  if (name == "L") unicode_class = UnicodeClass::letter;
  else if (name == "N") unicode_class = UnicodeClass::number;
  else return false;
  return true;
}

}  // namespace

bool in_unicode_class(uint32_t code_point, UnicodeClass unicode_class) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(code_point))) {
    case UTF8PROC_CATEGORY_CN: {
      // The rows are in code point order: the one that may hold it is the last starting at or before it.
      const auto* row = std::upper_bound(std::begin(kAssignedSinceUtf8proc), std::end(kAssignedSinceUtf8proc),
                                         code_point, [](uint32_t cp, const AssignedSince& r) { return cp < r.first; });
      return row != std::begin(kAssignedSinceUtf8proc) && code_point <= (row - 1)->last &&
             (row - 1)->unicode_class == class_letter(unicode_class);
    }
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return unicode_class == UnicodeClass::letter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return unicode_class == UnicodeClass::number;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return unicode_class == UnicodeClass::space;
    default:
      // White_Space's controls: tab, line feed, vertical tab, form feed, carriage return, next line.
      return unicode_class == UnicodeClass::space && ((code_point >= 0x09 && code_point <= 0x0D) || code_point == 0x85);
  }
}

std::string with_reference_unicode_classes(const std::string& pattern) {
  std::string out;
  bool in_brackets = false;  // inside a character class [...]
  size_t at = 0;
  while (at < pattern.size()) {
    const char c = pattern[at];
    if (c == '\\') {
      UnicodeClass unicode_class;
      bool negated = false;
      size_t length = 0;
      if (parse_class_escape(pattern, at, unicode_class, negated, length)) {
        out += class_text(unicode_class, negated, in_brackets);
        at += length;
      } else if (at + 1 < pattern.size() && pattern[at + 1] == 'Q') {
        const size_t end = pattern.find("\\E", at + 2);
        const size_t stop = end == std::string::npos ? pattern.size() : end + 2;
        out += pattern.substr(at, stop - at);
        at = stop;
      } else {
        // Any other escape is copied whole, so that an escaped bracket or backslash is not taken
        // for syntax; \cX (a control character) takes the X after it too.
        const size_t escape_length = at + 2 < pattern.size() && pattern[at + 1] == 'c' ? 3 : 2;
        out += pattern.substr(at, escape_length);
        at += escape_length;
      }
      continue;
    }
    if (!in_brackets && c == '[') {
      in_brackets = true;
      out += c;
      ++at;
      // A ']' straight after "[" or "[^" is a member, not the end.
      if (at < pattern.size() && pattern[at] == '^') out += pattern[at++];
      if (at < pattern.size() && pattern[at] == ']') out += pattern[at++];
      continue;
    }
    if (in_brackets && c == '[' && at + 1 < pattern.size() && pattern[at + 1] == ':') {
      const size_t end = pattern.find(":]", at + 2);  // a POSIX class such as [:alpha:]
      const size_t stop = end == std::string::npos ? at + 2 : end + 2;
      out += pattern.substr(at, stop - at);
      at = stop;
      continue;
    }
    if (in_brackets && c == ']') in_brackets = false;
    out += c;
    ++at;
  }
  return out;
}

}  // namespace topotrain::data
