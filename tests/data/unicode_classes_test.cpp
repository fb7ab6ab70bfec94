// The \p{L}, \p{N} and \s of pre-tokenizer regexes against HF's tokenizer: PCRE2's own
// tables, asked through properties the rewriting leaves alone, must differ from ours exactly
// where bench/data/unicode_classes.py measured HF's to differ (tests/data/qwen3_unicode_probes.json).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include <fstream>

#include "topotrain/core/error.h"
#include "topotrain/data/unicode_classes.h"
#include "topotrain/data/unicode_regex.h"

namespace topotrain::data {
namespace {

const std::string kProbes = std::string(TOPOTRAIN_SOURCE_DIR) + "/tests/data/qwen3_unicode_probes.json";

std::string utf8(uint32_t code_point) {
  utf8proc_uint8_t buffer[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(code_point), buffer);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Every scalar value in order, and for each byte the code point it belongs to.
struct AllCodePoints {
  std::string text;
  std::vector<uint32_t> code_point_at;
  AllCodePoints() {
    for (uint32_t c = 0; c <= 0x10FFFF; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      text += utf8(c);
      code_point_at.resize(text.size(), c);
    }
  }
};

// Which code points `item` (a class or property) matches, by code point.
std::vector<bool> members(const std::string& item) {
  static const AllCodePoints all;
  std::vector<bool> in(0x110000, false);
  for (const auto& [begin, end] : UnicodeRegex(item + "+", "test").find_all(all.text)) {
    for (uint32_t c = all.code_point_at[begin]; c <= all.code_point_at[end - 1]; ++c) in[c] = true;
  }
  return in;
}

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges differences(const std::vector<bool>& a, const std::vector<bool>& b) {
  Ranges out;
  for (uint32_t c = 0; c < a.size(); ++c) {
    if (a[c] == b[c]) continue;
    if (!out.empty() && out.back().second == c - 1) out.back().second = c;
    else out.emplace_back(c, c);
  }
  return out;
}

nlohmann::json probes_fixture() {
  std::ifstream in(kProbes);
  EXPECT_TRUE(in) << kProbes;
  return nlohmann::json::parse(in);
}

TEST(UnicodeClasses, DifferFromPcre2TablesExactlyWhereHfsDo) {
  const nlohmann::json fixture = probes_fixture();
  struct Case {
    const char* ours;
    const char* pcre2;  // PCRE2's own class, from properties the rewriting leaves to PCRE2
    char letter;        // the class's letter in the fixture
  };
  for (const Case& k : {Case{R"(\p{L})", R"([\p{Lu}\p{Ll}\p{Lt}\p{Lm}\p{Lo}])", 'L'},
                        Case{R"(\p{N})", R"([\p{Nd}\p{Nl}\p{No}])", 'N'}, Case{R"(\s)", R"([\p{Z}\h\v])", 's'}}) {
    Ranges expected;
    for (const auto& row : fixture.at("differences")) {
      const bool hf = row[2].get<std::string>().find(k.letter) != std::string::npos;
      const bool pcre2 = row[3].get<std::string>().find(k.letter) != std::string::npos;
      if (hf != pcre2) expected.emplace_back(row[0].get<uint32_t>(), row[1].get<uint32_t>());
    }
    EXPECT_FALSE(expected.empty()) << k.ours;
    EXPECT_EQ(differences(members(k.ours), members(k.pcre2)), expected) << k.ours;
  }
}

TEST(UnicodeClasses, WhatHfReadsInTheMeasuredCases) {
  EXPECT_FALSE(in_unicode_class(0x180E, UnicodeClass::space));   // Mongolian vowel separator: Cf
  EXPECT_TRUE(in_unicode_class(0x0085, UnicodeClass::space));    // next line: White_Space
  EXPECT_TRUE(in_unicode_class(0x1D2C0, UnicodeClass::number));  // Kaktovik numeral zero (15.0)
  EXPECT_TRUE(in_unicode_class(0x31350, UnicodeClass::letter));  // CJK extension H (15.0)
  EXPECT_TRUE(in_unicode_class(0x2EBF0, UnicodeClass::letter));  // CJK extension I (15.1)
  EXPECT_TRUE(in_unicode_class(0x10D40, UnicodeClass::number));  // Garay digit zero (16.0)
  EXPECT_FALSE(in_unicode_class(0x10D40, UnicodeClass::letter));
  EXPECT_FALSE(in_unicode_class(0x0378, UnicodeClass::letter));  // unassigned
}

std::vector<std::pair<size_t, size_t>> find_all(const std::string& pattern, const std::string& text) {
  return UnicodeRegex(pattern, "test").find_all(text);
}

using Matches = std::vector<std::pair<size_t, size_t>>;

TEST(UnicodeClasses, RewritingKeepsTheRestOfThePattern) {
  const std::string mvs = utf8(0x180E), kaktovik = utf8(0x1D2C0), cjk_h = utf8(0x31350);
  // Negations, outside and inside brackets.
  EXPECT_EQ(find_all(R"(\S)", mvs), (Matches{{0, 3}}));
  EXPECT_EQ(find_all(R"(\s)", mvs), Matches{});
  EXPECT_EQ(find_all(R"([\S])", mvs + " "), (Matches{{0, 3}}));
  EXPECT_EQ(find_all(R"([^\s\p{L}\p{N}]+)", mvs + cjk_h + kaktovik + " a"), (Matches{{0, 3}}));
  EXPECT_EQ(find_all(R"(\P{L}+)", kaktovik + cjk_h), (Matches{{0, 4}}));
  EXPECT_EQ(find_all(R"(\p{^L}+)", kaktovik + cjk_h), (Matches{{0, 4}}));
  EXPECT_EQ(find_all(R"(\pL)", cjk_h), (Matches{{0, 4}}));
  EXPECT_EQ(find_all(R"([\PN]+)", kaktovik + "a"), (Matches{{4, 5}}));
  // Escaped and quoted text stays literal; brackets and POSIX classes keep their meaning.
  EXPECT_EQ(find_all(R"(\\p{L})", "x\\p{L}"), (Matches{{1, 6}}));
  EXPECT_EQ(find_all(R"(\Q\s[\E)", "a\\s[ "), (Matches{{1, 4}}));
  EXPECT_EQ(find_all(R"([\]\s]+)", "] ]x"), (Matches{{0, 3}}));
  EXPECT_EQ(find_all(R"([]\p{N}]+)", "]1" + kaktovik + "x"), (Matches{{0, 6}}));
  EXPECT_EQ(find_all(R"([[:alpha:]\p{N}]+)", "a" + kaktovik + "-"), (Matches{{0, 5}}));
  EXPECT_EQ(find_all(R"(\c[\s)", "\x1b "), (Matches{{0, 2}}));
  // Other properties are PCRE2's.
  EXPECT_EQ(find_all(R"(\p{Lu}+)", "aBC"), (Matches{{1, 3}}));
}

// A pattern that does not compile is reported as written, with the offset into it.
TEST(UnicodeClasses, CompileErrorsQuoteThePatternAsWritten) {
  try {
    UnicodeRegex(R"(\p{L}+(\s)", "tokenizer.json pre_tokenizer");
    FAIL();
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(R"(tokenizer.json pre_tokenizer: the regex \p{L}+(\s does not compile at offset 9)"),
              std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace topotrain::data
