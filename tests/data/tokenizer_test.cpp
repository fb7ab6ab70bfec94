// Tokenizers on inputs whose ids are worked out by hand.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "test_dir.h"
#include "topotrain/core/error.h"
#include "topotrain/data/bpe_tokenizer.h"
#include "topotrain/data/byte_tokenizer.h"
#include "topotrain/data/document_encoder.h"
#include "topotrain/data/prepare.h"
#include "topotrain/data/token_dataset.h"
#include "topotrain/data/tokenizer_files.h"
#include "topotrain/data/unicode_normalizer.h"
#include "topotrain/data/unicode_regex.h"

namespace topotrain::data {
namespace {

using Ids = std::vector<uint32_t>;

// Qwen2's pre-tokenizer pattern, as its tokenizer.json spells it.
const char* kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A tiny byte-level BPE: "Ġ" is the alphabet's space (byte 0x20 -> U+0120), "Ċ" its
// newline (0x0A -> U+010A). Merge ranks are the order of `merges`.
std::string tiny_tokenizer_json(const std::string& pre_tokenizer, bool merges_as_pairs) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"}};
  std::string m;
  for (const auto& [a, b] : merges) {
    m += (m.empty() ? "" : ",") + (merges_as_pairs ? "[\"" + a + "\",\"" + b + "\"]" : "\"" + a + " " + b + "\"");
  }
  return R"({"version": "1.0", "normalizer": {"type": "NFC"}, "pre_tokenizer": )" + pre_tokenizer + R"(,
  "added_tokens": [{"id": 17, "content": "<|endoftext|>", "special": true},
                   {"id": 18, "content": "<|im_start|>", "special": true},
                   {"id": 19, "content": "<|im_end|>", "special": true},
                   {"id": 20, "content": "<|im", "special": false}],
  "model": {"type": "BPE", "ignore_merges": false,
    "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "!": 8, "he": 9, "ll": 10,
              "hell": 11, "hello": 12, "Ġw": 13, "or": 14, "Ġwor": 15, "Ċ": 16, "'": 21, "s": 22, "S": 23},
    "merges": [)" + m + "]}}";
}

std::string qwen_pre_tokenizer() {
  std::string escaped;
  for (char c : std::string(kQwenPattern)) {
    if (c == '\\' || c == '"') escaped += '\\';
    escaped += c;
  }
  return R"({"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": ")" + escaped + R"("}, "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})";
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = test_file(name);
  std::ofstream(path) << text;
  return path;
}

Ids encode(const Tokenizer& t, const std::string& text) {
  Ids ids;
  t.encode(text, ids);
  return ids;
}

std::vector<std::string> pieces(const UnicodeRegex& regex, const std::string& text) {
  std::vector<std::string> out;
  for (const auto& [begin, end] : regex.find_all(text)) out.push_back(text.substr(begin, end - begin));
  return out;
}

TEST(UnicodeRegex, QwenPatternUsesUnicodeClasses) {
  const UnicodeRegex regex(kQwenPattern, "test");
  EXPECT_EQ(pieces(regex, "Hello 世界123 ok\n\nIt'S"),
            (std::vector<std::string>{"Hello", " 世界", "1", "2", "3", " ok", "\n\n", "It", "'S"}));
  EXPECT_EQ(pieces(regex, "naïve café"), (std::vector<std::string>{"naïve", " café"}));
}

TEST(UnicodeRegex, InvalidUtf8IsReportedWithItsByte) {
  const UnicodeRegex regex(kQwenPattern, "test");
  try {
    regex.find_all(std::string("ok \xff bad"));
    FAIL() << "invalid UTF-8 must throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 at byte 3"), std::string::npos) << e.what();
  }
}

TEST(ByteTokenizer, BytesAreIdsAndSpecialsFollow) {
  const ByteTokenizer t;
  EXPECT_EQ(encode(t, "A\n\xc3\xa9"), (Ids{65, 10, 0xc3, 0xa9}));
  EXPECT_EQ(encode(t, "<|im_end|>").size(), 10u) << "text is never read as special tokens";
  EXPECT_EQ(t.special_token("<|im_start|>"), 257u);
  EXPECT_EQ(t.eos_id(), 256u);
  EXPECT_EQ(t.vocab_size(), 259u);
}

TEST(BpeTokenizer, MergesByRankOnQwenStylePreTokenizer) {
  const auto t = BpeTokenizer::load(write_temp("qwen.json", tiny_tokenizer_json(qwen_pre_tokenizer(), false)), "");
  // "hello" | " world" | "!": hello = 12; Ġ w o r l d -> Ġw(4) -> or(5) -> Ġwor(6) -> [Ġwor, l, d].
  EXPECT_EQ(encode(*t, "hello world!"), (Ids{12, 15, 2, 7, 8}));
  EXPECT_EQ(encode(*t, "hell"), (Ids{11}));          // h e -> he, l l -> ll, he ll -> hell
  EXPECT_EQ(encode(*t, "llll"), (Ids{10, 10}));      // every occurrence of the best pair
  EXPECT_EQ(encode(*t, "lll"), (Ids{10, 2}));        // left to right
  EXPECT_EQ(encode(*t, "he\nhe"), (Ids{9, 16, 9}));  // newline is its own piece, spelled Ċ
  EXPECT_EQ(encode(*t, "he's"), (Ids{9, 21, 22}));   // the contraction is split off, then not merged
  EXPECT_EQ(t->vocab_size(), 24u);
  EXPECT_EQ(t->eos_id(), 17u);
}

TEST(BpeTokenizer, AddedTokensAreMatchedFirstAndLongestFirst) {
  const auto t = BpeTokenizer::load(write_temp("added.json", tiny_tokenizer_json(qwen_pre_tokenizer(), false)), "");
  EXPECT_EQ(encode(*t, "<|im_start|>hello<|im_end|>\n"), (Ids{18, 12, 19, 16}));
  EXPECT_EQ(encode(*t, "he<|im"), (Ids{9, 20}));  // the shorter added token where the long one does not match
  EXPECT_EQ(t->special_token("<|im_end|>"), 19u);
}

TEST(BpeTokenizer, Gpt2ByteLevelRegexAndPairMerges) {
  const auto t = BpeTokenizer::load(
      write_temp("gpt2.json",
                 tiny_tokenizer_json(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})", true)),
      "<|im_end|>");
  EXPECT_EQ(encode(*t, "hello world!"), (Ids{12, 15, 2, 7, 8}));
  EXPECT_EQ(encode(*t, "he's"), (Ids{9, 21, 22}));
  EXPECT_EQ(t->eos_id(), 19u);
}

TEST(BpeTokenizer, UnknownByteAndUnsupportedFilesAreNamed) {
  const std::string path = write_temp("unknown.json", tiny_tokenizer_json(qwen_pre_tokenizer(), false));
  const auto t = BpeTokenizer::load(path, "");
  try {
    encode(*t, "z");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("byte 0x7a has no token"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BpeTokenizer::load(path, "<|nope|>"), ConfigError);
  const std::string wordpiece = write_temp("wp.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  try {
    BpeTokenizer::load(wordpiece, "");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.type \"WordPiece\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(wordpiece), std::string::npos) << e.what();
  }
}

// Expected values from Python's unicodedata (an independent implementation, Unicode 14):
// composition, Hangul jamo, compatibility ligatures and numbers, a singleton (U+212B).
TEST(UnicodeNormalizer, TheFourFormsAsUnicodeDefinesThem) {
  struct Case {
    std::string input, nfc, nfd, nfkc, nfkd;
  };
  const std::vector<Case> cases = {
      {"e\xcc\x81", "\xc3\xa9", "e\xcc\x81", "\xc3\xa9", "e\xcc\x81"},
      {"\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81", "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81",
       "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"},
      {"\xef\xac\x81", "\xef\xac\x81", "\xef\xac\x81", "fi", "fi"},
      {"\xe2\x84\xab", "\xc3\x85", "A\xcc\x8a", "\xc3\x85", "A\xcc\x8a"},
      {"\xe2\x91\xa0", "\xe2\x91\xa0", "\xe2\x91\xa0", "1", "1"},
      {"Cafe\xcc\x81 \xc3\xa9", "Caf\xc3\xa9 \xc3\xa9", "Cafe\xcc\x81 e\xcc\x81", "Caf\xc3\xa9 \xc3\xa9",
       "Cafe\xcc\x81 e\xcc\x81"},
  };
  const UnicodeNormalizer nfc({NormalForm::nfc}), nfd({NormalForm::nfd}), nfkc({NormalForm::nfkc}),
      nfkd({NormalForm::nfkd});
  for (const Case& c : cases) {
    EXPECT_EQ(nfc.apply(c.input), c.nfc) << c.input;
    EXPECT_EQ(nfd.apply(c.input), c.nfd) << c.input;
    EXPECT_EQ(nfkc.apply(c.input), c.nfkc) << c.input;
    EXPECT_EQ(nfkd.apply(c.input), c.nfkd) << c.input;
    EXPECT_TRUE(nfc.may_change(c.input));
  }
  // A Sequence applies its forms in order: NFD then NFKC is NFKC.
  EXPECT_EQ(UnicodeNormalizer({NormalForm::nfd, NormalForm::nfkc}).apply("\xef\xac\x81 e\xcc\x81"), "fi \xc3\xa9");
  EXPECT_FALSE(nfc.may_change("plain ASCII, even with \0 inside"));
  EXPECT_FALSE(UnicodeNormalizer().may_change("\xc3\xa9"));
  NormalForm form;
  EXPECT_TRUE(parse_normal_form("NFKD", form) && form == NormalForm::nfkd);
  EXPECT_FALSE(parse_normal_form("Lowercase", form));
  try {
    nfc.apply("ok \xc3\xa9 then \xff");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 at byte 11"), std::string::npos) << e.what();
  }
}

// The declared normalizer acts before the pre-tokenizer: decomposed input (macOS file names,
// combining accents) gets the ids of its composed form. Kinds that are not implemented are
// refused at load, naming the file and the kind.
TEST(BpeTokenizer, DeclaredNormalizerActsAndOthersAreRefused) {
  std::string json = tiny_tokenizer_json(qwen_pre_tokenizer(), false);
  const std::string vocab_end = R"("S": 23})";
  json.replace(json.find(vocab_end), vocab_end.size(), R"("S": 23, "Ã": 24, "©": 25})");  // é's bytes C3 A9
  const auto t = BpeTokenizer::load(write_temp("nfc.json", json), "");
  EXPECT_EQ(encode(*t, "he\xc3\xa9"), (Ids{9, 24, 25}));
  EXPECT_EQ(encode(*t, "he" "e\xcc\x81"), (Ids{9, 24, 25}));
  EXPECT_EQ(encode(*t, "<|im_start|>e\xcc\x81<|im_end|>"), (Ids{18, 24, 25, 19}));
  const std::string nfc = R"("normalizer": {"type": "NFC"})";
  std::string sequence = json;
  sequence.replace(sequence.find(nfc), nfc.size(),
                   R"("normalizer": {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "NFKC"}]})");
  EXPECT_EQ(encode(*BpeTokenizer::load(write_temp("seq.json", sequence), ""), "e\xcc\x81"), (Ids{24, 25}));
  std::string lowercase = json;
  lowercase.replace(lowercase.find(nfc), nfc.size(),
                    R"("normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]})");
  const std::string path = write_temp("lower.json", lowercase);
  try {
    BpeTokenizer::load(path, "");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(R"(normalizer {"type":"Lowercase"})"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// Llama 3's post-processor: ByteLevel then TemplateProcessing with the BOS before $A.
TEST(BpeTokenizer, TemplateProcessingPrefixStartsDocumentsAndOthersAreRefused) {
  const std::string json = tiny_tokenizer_json(qwen_pre_tokenizer(), false);
  const auto with_post = [&](const std::string& name, const std::string& post) {
    std::string j = json;
    j.replace(j.rfind('}'), 1, R"(, "post_processor": )" + post + "}");
    return write_temp(name, j);
  };
  const std::string bos = R"({"SpecialToken": {"id": "<|im_start|>", "type_id": 0}})";
  const std::string specials =
      R"("special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [18], "tokens": ["<|im_start|>"]}})";
  const auto llama = BpeTokenizer::load(
      with_post("bos.json", R"({"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": true},
          {"type": "TemplateProcessing", "single": [)" + bos + R"(, {"Sequence": {"id": "A", "type_id": 0}}],
           "pair": [], )" + specials + "}]}"),
      "");
  EXPECT_EQ(llama->document_prefix(), (Ids{18}));
  EncodedDocument doc;
  encode_text_document(*llama, "hello", doc);
  EXPECT_EQ(doc.tokens, (Ids{18, 12, 17}));  // BOS, "hello", eos
  EXPECT_TRUE(BpeTokenizer::load(write_temp("none.json", json), "")->document_prefix().empty());
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]})",
       "post_processor type \"RobertaProcessing\""},
      {R"({"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}, )" + bos + "], " +
           specials + "}",
       "\"<|im_start|>\" after $A"}};
  for (const auto& [post, message] : refused) {
    try {
      BpeTokenizer::load(with_post("refused.json", post), "");
      FAIL() << post;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  std::string lstrip = json;
  lstrip.replace(lstrip.find(R"("special": false})"), 17, R"("special": false, "lstrip": true})");
  EXPECT_THROW(BpeTokenizer::load(write_temp("lstrip.json", lstrip), ""), ConfigError);
}

// The real Qwen3 tokenizer.json (../shared/data/qwen3-tokenizer next to the repository, or
// TOPOTRAIN_QWEN3_TOKENIZER); tests using it are skipped when it is absent.
std::string qwen3_tokenizer_path() {
  const char* from_env = std::getenv("TOPOTRAIN_QWEN3_TOKENIZER");
  return from_env ? std::string(from_env)
                  : std::string(TOPOTRAIN_SOURCE_DIR) + "/../shared/data/qwen3-tokenizer/tokenizer.json";
}

// It declares NFC, so decomposed text (Korean jamo, combining accents) tokenizes exactly as
// its composed form, where it used to come out up to ~2.8x longer; compatibility characters
// are left alone (NFC, not NFKC).
TEST(BpeTokenizer, RealQwen3TokenizerAppliesItsNfc) {
  const std::string path = qwen3_tokenizer_path();
  if (!std::ifstream(path)) GTEST_SKIP() << "no Qwen3 tokenizer.json at " << path;
  const auto t = BpeTokenizer::load(path, "");
  const UnicodeNormalizer nfd({NormalForm::nfd});
  for (const std::string composed :
       {"\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 \xed\x85\x8d\xec\x8a\xa4\xed\x8a\xb8",  // 한국어 텍스트
        "Caf\xc3\xa9 cr\xc3\xa8me br\xc3\xbbl\xc3\xa9" "e, na\xc3\xafve r\xc3\xa9sum\xc3\xa9",
        "Ti\xe1\xba\xbfng Vi\xe1\xbb\x87t c\xc3\xb3 d\xe1\xba\xa5u"}) {  // Tiếng Việt có dấu
    const std::string decomposed = nfd.apply(composed);
    ASSERT_NE(decomposed, composed);
    EXPECT_EQ(encode(*t, decomposed), encode(*t, composed)) << composed;
  }
  EXPECT_NE(encode(*t, "\xef\xac\x81"), encode(*t, "fi"));  // the ligature stays a ligature
}

// HF's ids for probes ("a{c}a", "1{c}{c}1", " {c}x", "x{c}{c}x") of the first and last code
// point of each range where PCRE2's Unicode tables class characters otherwise than HF's
// (U+180E, characters of Unicode 15.0 to 16.0), recorded by bench/data/unicode_classes.py.
TEST(BpeTokenizer, RealQwen3TokenizerClassesCodePointsAsHfDoes) {
  const std::string path = qwen3_tokenizer_path();
  if (!std::ifstream(path)) GTEST_SKIP() << "no Qwen3 tokenizer.json at " << path;
  const auto t = BpeTokenizer::load(path, "");
  std::ifstream in(std::string(TOPOTRAIN_SOURCE_DIR) + "/tests/data/qwen3_unicode_probes.json");
  ASSERT_TRUE(in);
  const auto probes = nlohmann::json::parse(in).at("probes");
  ASSERT_GE(probes.size(), 100u);
  for (const auto& probe : probes) {
    const std::string text = probe.at("text").get<std::string>();
    EXPECT_EQ(encode(*t, text), probe.at("ids").get<Ids>()) << text;
  }
}

// The tokenizer's files travel with its tokens: read from beside tokenizer.json (only the
// names carried), stored in the dataset file byte for byte, and their special tokens found
// by id as tokenizer_config.json names them.
TEST(TokenizerFiles, TravelFromTheTokenizerFolderIntoTheDataset) {
  const std::string folder = test_file("hf_tokenizer");
  make_directories(folder);
  const std::string tokenizer_json = join_path(folder, "tokenizer.json");
  std::ofstream(tokenizer_json) << tiny_tokenizer_json(qwen_pre_tokenizer(), false);
  const std::string config = R"({"eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"},
    "bos_token": null, "model_max_length": 64})";
  std::ofstream(join_path(folder, "tokenizer_config.json")) << config;
  std::ofstream(join_path(folder, "chat_template.jinja")) << "{{ messages }}";
  std::ofstream(join_path(folder, "vocab.txt")) << "not carried";
  const TokenizerFiles files = read_tokenizer_files(tokenizer_json);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files.at("tokenizer.json"), tiny_tokenizer_json(qwen_pre_tokenizer(), false));
  EXPECT_EQ(files.at("tokenizer_config.json"), config);
  EXPECT_EQ(files.at("chat_template.jinja"), "{{ messages }}");

  const SpecialTokenIds ids = special_token_ids(files);
  EXPECT_EQ(ids.eos, std::optional<int64_t>(19));  // an added token
  EXPECT_EQ(ids.pad, std::optional<int64_t>(17));  // named by an AddedToken object
  EXPECT_FALSE(ids.bos);                           // null
  TokenizerFiles vocabulary = files;
  vocabulary["tokenizer_config.json"] = R"({"eos_token": "hello"})";
  EXPECT_EQ(special_token_ids(vocabulary).eos, std::optional<int64_t>(12));  // in the BPE vocabulary
  vocabulary["tokenizer_config.json"] = R"({"eos_token": "</s>"})";
  try {
    special_token_ids(vocabulary);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("eos_token \"</s>\""), std::string::npos) << e.what();
  }

  PrepareConfig prepare;
  prepare.tokenizer = tokenizer_json;
  prepare.inputs = {write_temp("hello.txt", "hello world")};
  prepare.output = test_file("hello.h5");
  prepare_dataset(prepare);
  EXPECT_EQ(TokenDataset::stored_tokenizer_files(prepare.output), files);
  prepare.tokenizer = "byte";
  prepare_dataset(prepare);
  EXPECT_TRUE(TokenDataset::stored_tokenizer_files(prepare.output).empty());
}

}  // namespace
}  // namespace topotrain::data
