#include "topotrain/data/corpus_reader.h"

#include <sstream>
#include <system_error>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/data/binary_input.h"

namespace topotrain::data {
namespace {

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

}  // namespace

CorpusReader::CorpusReader(std::vector<std::string> inputs, InputFormat format, TextSplit split)
    : inputs_(std::move(inputs)), format_(format), split_(split) {
  if (inputs_.empty()) throw ConfigError("no input files given; pass text or JSONL files to tokenize");
  for (const std::string& path : inputs_) {
    uint64_t size = 0;
    try {
      size = file_size(path);
    } catch (const std::system_error& e) {
      throw ConfigError(cat("cannot read input '", path, "': ", e.code().message()));
    }
    if (!is_regular_file(path)) throw ConfigError(cat("cannot read input '", path, "': not a regular file"));
    // Every input is checked before anything is read or written: a Parquet shard among
    // JSONL files is refused before the hours of tokenizing the others.
    char head[8] = {};
    std::ifstream in(path, std::ios::binary);
    in.read(head, sizeof head);
    refuse_binary_container(path, std::string_view(head, static_cast<size_t>(in.gcount())));
    // Alpaca's alpaca_data.json and many exports are one JSON array of records, which read
    // as lines would fail at "[" with a parser message that does not say what to do. ("[1, 2]"
    // lines are left to the per-line error, "not an object".)
    in.clear();
    in.seekg(0);
    if (is_jsonl(path) && (in >> std::ws).get() == '[' && (in >> std::ws).peek() == '{') {
      throw ConfigError(cat("input '", path, "' is a JSON array, not JSON Lines (one object per line); convert it, "
                            "e.g. jq -c '.[]' '", path, "' > out.jsonl, or python3 -c \"import json, sys; "
                            "[print(json.dumps(r, ensure_ascii=False)) for r in json.load(open(sys.argv[1]))]\" '",
                            path, "' > out.jsonl"));
    }
    total_bytes_ += size;
  }
}

bool CorpusReader::is_jsonl(const std::string& path) const {
  if (format_ != InputFormat::by_extension) return format_ == InputFormat::jsonl;
  const std::string ext = file_extension(path);
  return ext == ".jsonl" || ext == ".json";
}

void CorpusReader::read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  const std::string text = content.str();
  refuse_nul_bytes(path, 1, text);
  bytes_read_ += text.size();
  if (split_ == TextSplit::file) {
    if (!blank(text)) pending_.push_back(RawDocument{text, false, path});
    return;
  }
  // Paragraphs: runs of non-blank lines, each kept with its inner newlines.
  size_t at = 0, paragraph_begin = std::string::npos, paragraph_end = 0, line_number = 0, first_line = 0;
  while (at <= text.size()) {
    size_t eol = text.find('\n', at);
    if (eol == std::string::npos) eol = text.size();
    ++line_number;
    if (blank(std::string_view(text).substr(at, eol - at))) {
      if (paragraph_begin != std::string::npos) {
        pending_.push_back(RawDocument{text.substr(paragraph_begin, paragraph_end - paragraph_begin), false,
                                    cat(path, ":", first_line)});
        paragraph_begin = std::string::npos;
      }
    } else {
      if (paragraph_begin == std::string::npos) {
        paragraph_begin = at;
        first_line = line_number;
      }
      paragraph_end = eol;
    }
    at = eol + 1;
  }
  if (paragraph_begin != std::string::npos) {
    pending_.push_back(RawDocument{text.substr(paragraph_begin, paragraph_end - paragraph_begin), false,
                                cat(path, ":", first_line)});
  }
}

bool CorpusReader::next_batch(std::vector<RawDocument>& batch, size_t max_bytes) {
  batch.clear();
  size_t bytes = 0;
  while (bytes < max_bytes) {
    if (!pending_.empty()) {
      bytes += pending_.front().body.size();
      batch.push_back(std::move(pending_.front()));
      pending_.pop_front();
      continue;
    }
    if (jsonl_.is_open()) {
      std::string line;
      if (std::getline(jsonl_, line)) {
        ++jsonl_line_;
        refuse_nul_bytes(jsonl_path_, jsonl_line_, line);
        bytes_read_ += line.size() + 1;
        bytes += line.size() + 1;
        if (!blank(line)) pending_.push_back(RawDocument{std::move(line), true, cat(jsonl_path_, ":", jsonl_line_)});
        continue;
      }
      jsonl_.close();
    }
    if (next_input_ == inputs_.size()) break;
    const std::string& path = inputs_[next_input_++];
    if (is_jsonl(path)) {
      jsonl_.open(path, std::ios::binary);
      jsonl_path_ = path;
      jsonl_line_ = 0;
    } else {
      read_text_file(path);
    }
  }
  return !batch.empty() || !pending_.empty() || next_input_ < inputs_.size() || jsonl_.is_open();
}

}  // namespace topotrain::data
