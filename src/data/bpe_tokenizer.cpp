#include "topotrain/data/bpe_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <fstream>
#include <limits>

#include "topotrain/core/error.h"

namespace topotrain::data {
namespace {

// GPT-2's pre-tokenizer pattern, which ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
  return out;
}

// Byte-level BPE spells every byte as a printable character: bytes that are printable
// Latin-1 stand for themselves, the others (controls, space, ...) take the code points
// 256, 257, ... in byte order. Vocabulary and merges are written in this alphabet.
const std::array<std::string, 256>& byte_alphabet() {
  static const std::array<std::string, 256> alphabet = [] {
    std::array<std::string, 256> a;
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      a[b] = utf8(printable ? b : next++);
    }
    return a;
  }();
  return alphabet;
}

// `where` is a literal: a std::string temporary there would make GCC 13 suspect the returned
// reference of dangling (-Wdangling-reference).
const nlohmann::json& require(const nlohmann::json& node, const char* key, const char* where,
                              const std::string& path) {
  if (!node.is_object() || !node.contains(key)) {
    throw ConfigError(cat("'", path, "': ", where, " has no \"", key, "\"; is this a HF tokenizer.json?"));
  }
  return node.at(key);
}

// The steps of a normalizer, pre-tokenizer or post-processor: a Sequence's list (under
// `list_key`), a single one, or none (null). `key` is where the node sits in the file.
std::vector<nlohmann::json> steps_of(const nlohmann::json& file, const char* key, const char* list_key,
                                     const std::string& path) {
  const nlohmann::json node = file.value(key, nlohmann::json());
  if (node.is_null()) return {};
  if (!node.is_object() || node.value("type", "") != "Sequence") return {node};
  const auto& list = require(node, list_key, key, path);
  return std::vector<nlohmann::json>(list.begin(), list.end());
}

void unsupported_if(bool condition, const std::string& path, const std::string& what) {
  if (condition) throw ConfigError(cat("'", path, "': ", what, " is not supported by topotrain's BPE tokenizer"));
}

// Natural text repeats its words: a per-thread cache from piece to ids skips the merge
// loop for most pieces. Entries belong to the tokenizer with serial `owner` (not to an
// address, which a later tokenizer could reuse); it is emptied when full.
struct PieceCache {
  static constexpr size_t kMaxEntries = 1 << 16;
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<uint32_t>> ids;
};
thread_local PieceCache piece_cache;
std::atomic<uint64_t> next_serial{1};

}  // namespace

std::unique_ptr<BpeTokenizer> BpeTokenizer::load(const std::string& path, const std::string& eos) {
  std::ifstream in(path);
  if (!in) throw ConfigError(cat("cannot open tokenizer file '", path, "'"));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(cat("'", path, "' is not valid JSON: ", e.what()));
  }
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer);
  t->path_ = path;
  t->serial_ = next_serial++;
  uint64_t max_id = 0;
  try {
    const auto& model = require(j, "model", "the file", path);
    const std::string type = model.value("type", "");
    unsupported_if(type != "BPE", path, cat("model.type \"", type, "\" (only \"BPE\")"));
    unsupported_if(!model.value("continuing_subword_prefix", nlohmann::json()).is_null() &&
                       !model["continuing_subword_prefix"].get<std::string>().empty(),
                   path, "model.continuing_subword_prefix");
    unsupported_if(!model.value("end_of_word_suffix", nlohmann::json()).is_null() &&
                       !model["end_of_word_suffix"].get<std::string>().empty(),
                   path, "model.end_of_word_suffix");
    unsupported_if(model.value("byte_fallback", false), path, "model.byte_fallback = true");
    unsupported_if(!model.value("dropout", nlohmann::json()).is_null() && model["dropout"].get<double>() != 0.0, path,
                   "model.dropout (BPE dropout samples the merges)");
    // As Llama 3's: a piece spelled by one vocabulary entry is that token, whatever the merges.
    t->ignore_merges_ = model.value("ignore_merges", false);
    for (const auto& [token, id] : require(model, "vocab", "model", path).items()) {
      t->vocab_[token] = id.get<uint32_t>();
      max_id = std::max<uint64_t>(max_id, id.get<uint32_t>());
    }
    // Each character of the alphabet spells one byte: count the characters (UTF-8 lead bytes).
    t->byte_length_.assign(max_id + 1, 0);
    for (const auto& [token, id] : t->vocab_) {
      t->byte_length_[id] = static_cast<uint32_t>(
          std::count_if(token.begin(), token.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
    }
    const auto& merges = require(model, "merges", "model", path);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      std::string left, right;
      if (merges[rank].is_string()) {
        const std::string m = merges[rank].get<std::string>();
        const size_t space = m.find(' ');
        if (space == std::string::npos) throw ConfigError(cat("'", path, "': merge ", rank, " \"", m, "\" has no space"));
        left = m.substr(0, space);
        right = m.substr(space + 1);
      } else {
        left = merges[rank].at(0).get<std::string>();
        right = merges[rank].at(1).get<std::string>();
      }
      const auto l = t->vocab_.find(left), r = t->vocab_.find(right), m = t->vocab_.find(left + right);
      if (l == t->vocab_.end() || r == t->vocab_.end() || m == t->vocab_.end()) {
        throw ConfigError(cat("'", path, "': merge ", rank, " (\"", left, "\" + \"", right,
                              "\") uses or makes a token missing from model.vocab"));
      }
      const uint64_t key = (uint64_t{l->second} << 32) | r->second;
      t->merges_.emplace(key, Merge{static_cast<uint32_t>(rank), m->second});  // first (lowest) rank wins
    }
    const auto& alphabet = byte_alphabet();
    for (int b = 0; b < 256; ++b) {
      const auto it = t->vocab_.find(alphabet[b]);
      t->byte_ids_[b] = it == t->vocab_.end() ? int64_t{-1} : int64_t{it->second};
    }

    if (j.contains("added_tokens")) {
      std::vector<std::string> contents;
      for (const auto& added : j["added_tokens"]) {
        const std::string content = added.at("content").get<std::string>();
        const uint32_t id = added.at("id").get<uint32_t>();
        for (const char* key : {"lstrip", "rstrip", "single_word"}) {
          unsupported_if(added.value(key, false), path, cat("added token \"", content, "\" with ", key, " = true"));
        }
        t->added_[content] = id;
        max_id = std::max<uint64_t>(max_id, id);
        contents.push_back(content);
      }
      if (!contents.empty()) {
        // PCRE2 takes the first alternative that matches: longest first gives longest match.
        std::sort(contents.begin(), contents.end(),
                  [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
        std::string alternation;
        for (const std::string& c : contents) alternation += (alternation.empty() ? "" : "|") + regex_escape(c);
        t->added_pattern_ = std::make_unique<UnicodeRegex>(alternation, path + " added_tokens");
      }
    }

    std::vector<NormalForm> forms;
    for (const auto& kind : steps_of(j, "normalizer", "normalizers", path)) {
      NormalForm form;
      unsupported_if(!kind.is_object() || !parse_normal_form(kind.value("type", ""), form), path,
                     cat("normalizer ", kind.dump(), " (only NFC, NFD, NFKC, NFKD and a Sequence of them)"));
      forms.push_back(form);
    }
    t->normalizer_ = UnicodeNormalizer(std::move(forms));

    for (const auto& step : steps_of(j, "pre_tokenizer", "pretokenizers", path)) {
      const std::string type = step.value("type", "");
      if (type == "Split") {
        const auto& pattern = require(step, "pattern", "pre_tokenizer Split", path);
        unsupported_if(!pattern.contains("Regex"), path, "a Split pattern that is not {\"Regex\": ...}");
        unsupported_if(step.value("behavior", "") != "Isolated", path,
                       cat("Split behavior \"", step.value("behavior", ""), "\" (only \"Isolated\")"));
        unsupported_if(step.value("invert", false), path, "Split invert = true");
        t->split_patterns_.push_back(std::make_unique<UnicodeRegex>(pattern["Regex"].get<std::string>(),
                                                                     path + " pre_tokenizer"));
      } else if (type == "ByteLevel") {
        unsupported_if(step.value("add_prefix_space", false), path, "ByteLevel add_prefix_space = true");
        if (step.value("use_regex", true)) {
          t->split_patterns_.push_back(std::make_unique<UnicodeRegex>(kGpt2Pattern, "GPT-2 pattern"));
        }
      } else {
        unsupported_if(true, path, cat("pre_tokenizer type \"", type, "\""));
      }
    }
    t->read_post_processor(steps_of(j, "post_processor", "processors", path));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(cat("'", path, "' is not a HF tokenizer.json as expected: ", e.what()));
  }
  t->vocab_size_ = max_id + 1;
  const std::string eos_content = eos.empty() ? "<|endoftext|>" : eos;
  const auto eos_id = t->special_token(eos_content);
  if (!eos_id) {
    throw ConfigError(cat("'", path, "' has no token \"", eos_content,
                          "\" to end documents with; name its end-of-document token with --eos"));
  }
  t->eos_id_ = *eos_id;
  return t;
}

// HF's encode(add_special_tokens=True) runs the post-processor on every sequence; ByteLevel's
// only moves offsets, TemplateProcessing adds its tokens around $A (Llama 3: the BOS before).
void BpeTokenizer::read_post_processor(const std::vector<nlohmann::json>& steps) {
  for (const auto& step : steps) {
    const std::string type = step.value("type", "");
    if (type == "ByteLevel") continue;
    unsupported_if(type != "TemplateProcessing", path_,
                   cat("post_processor type \"", type, "\" (only ByteLevel and TemplateProcessing)"));
    std::vector<uint32_t> before;
    bool sequence_seen = false;
    for (const auto& piece : require(step, "single", "post_processor TemplateProcessing", path_)) {
      if (piece.contains("Sequence")) {
        sequence_seen = true;
        continue;
      }
      const auto& token = require(piece, "SpecialToken", "a TemplateProcessing piece", path_);
      const std::string name = require(token, "id", "a TemplateProcessing SpecialToken", path_).get<std::string>();
      unsupported_if(sequence_seen, path_, cat("a TemplateProcessing \"single\" template with \"", name,
                                               "\" after $A (only tokens before the sequence)"));
      const auto& special = require(require(step, "special_tokens", "post_processor TemplateProcessing", path_),
                                    name.c_str(), "TemplateProcessing special_tokens", path_);
      for (const auto& id : require(special, "ids", "a TemplateProcessing special token", path_)) {
        before.push_back(id.get<uint32_t>());
      }
    }
    // A later step wraps what the earlier ones made.
    document_prefix_.insert(document_prefix_.begin(), before.begin(), before.end());
  }
}

std::optional<uint32_t> BpeTokenizer::special_token(const std::string& content) const {
  if (const auto it = added_.find(content); it != added_.end()) return it->second;
  if (const auto it = vocab_.find(content); it != vocab_.end()) return it->second;
  return std::nullopt;
}

void BpeTokenizer::encode(std::string_view text, std::vector<uint32_t>& out) const {
  encode_added_and_ordinary(text, out, nullptr);
}

void BpeTokenizer::encode_with_spans(std::string_view text, std::vector<uint32_t>& ids,
                                     std::vector<ByteRange>& spans) const {
  encode_added_and_ordinary(text, ids, &spans);
}

void BpeTokenizer::encode_added_and_ordinary(std::string_view text, std::vector<uint32_t>& out,
                                             std::vector<ByteRange>* spans) const {
  size_t at = 0;
  if (added_pattern_) {
    for (const auto& [begin, end] : added_pattern_->find_all(text)) {
      encode_ordinary(text.substr(at, begin - at), at, out, spans);
      out.push_back(added_.at(std::string(text.substr(begin, end - begin))));
      if (spans) spans->push_back({begin, end});
      at = end;
    }
  }
  encode_ordinary(text.substr(at), at, out, spans);
}

void BpeTokenizer::encode_ordinary(std::string_view raw, size_t offset, std::vector<uint32_t>& out,
                                   std::vector<ByteRange>* spans) const {
  if (raw.empty()) return;
  // As HF does: the text between added tokens is normalized, then pre-tokenized.
  std::string normalized;
  std::string_view text = raw;
  std::vector<std::pair<size_t, size_t>> source;  // raw bytes of each normalized byte; empty: the same
  if (normalizer_.may_change(raw)) {
    text = normalized = spans ? normalizer_.apply_aligned(raw, source) : normalizer_.apply(raw);
    if (normalized == raw) source.clear();
  }
  // Each Split keeps its matches and the gaps between them as separate pieces.
  std::vector<std::string_view> pieces{text};
  for (const auto& pattern : split_patterns_) {
    std::vector<std::string_view> next;
    for (std::string_view piece : pieces) {
      size_t at = 0;
      for (const auto& [begin, end] : pattern->find_all(piece)) {
        if (begin > at) next.push_back(piece.substr(at, begin - at));
        next.push_back(piece.substr(begin, end - begin));
        at = end;
      }
      if (at < piece.size()) next.push_back(piece.substr(at));
    }
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) {
    const size_t first = out.size();
    encode_piece(piece, out);
    if (!spans) continue;
    size_t at = static_cast<size_t>(piece.data() - text.data());
    for (size_t i = first; i < out.size(); ++i) {
      const size_t end = at + byte_length_[out[i]];
      spans->push_back(source.empty() ? ByteRange{offset + at, offset + end}
                                      : ByteRange{offset + source[at].first, offset + source[end - 1].second});
      at = end;
    }
  }
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  if (piece_cache.owner != serial_) {
    piece_cache.ids.clear();
    piece_cache.owner = serial_;
  }
  std::string key(piece);
  if (const auto it = piece_cache.ids.find(key); it != piece_cache.ids.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<uint32_t> symbols;
  merge_piece(piece, symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (piece_cache.ids.size() >= PieceCache::kMaxEntries) piece_cache.ids.clear();
  piece_cache.ids.emplace(std::move(key), std::move(symbols));
}

void BpeTokenizer::merge_piece(std::string_view piece, std::vector<uint32_t>& symbols) const {
  if (ignore_merges_) {
    std::string spelled;
    for (char c : piece) spelled += byte_alphabet()[static_cast<unsigned char>(c)];
    if (const auto it = vocab_.find(spelled); it != vocab_.end()) {
      symbols.push_back(it->second);
      return;
    }
  }
  symbols.reserve(piece.size());
  for (char c : piece) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte_ids_[byte] < 0) {
      throw std::runtime_error(cat("byte 0x", std::hex, int(byte), std::dec, " has no token in the vocabulary of '",
                                   path_, "'; it is not a complete byte-level tokenizer"));
    }
    symbols.push_back(static_cast<uint32_t>(byte_ids_[byte]));
  }
  while (symbols.size() > 1) {
    uint32_t best_rank = std::numeric_limits<uint32_t>::max();
    uint64_t best_key = 0;
    uint32_t best_merged = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const uint64_t key = (uint64_t{symbols[i]} << 32) | symbols[i + 1];
      const auto it = merges_.find(key);
      if (it != merges_.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best_key = key;
        best_merged = it->second.merged;
      }
    }
    if (best_rank == std::numeric_limits<uint32_t>::max()) break;
    size_t write = 0;
    for (size_t read = 0; read < symbols.size(); ++read) {
      if (read + 1 < symbols.size() && ((uint64_t{symbols[read]} << 32) | symbols[read + 1]) == best_key) {
        symbols[write++] = best_merged;
        ++read;
      } else {
        symbols[write++] = symbols[read];
      }
    }
    symbols.resize(write);
  }
}

}  // namespace topotrain::data
