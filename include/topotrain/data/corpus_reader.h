// Reads the raw documents of topotrain-prepare's inputs, in order, a batch at a time.
//
// Text files: one document per file (TextSplit::file) or one per paragraph, paragraphs
// being separated by blank lines (TextSplit::paragraph). JSONL files (.jsonl, or any file
// with InputFormat::jsonl): one document per non-empty line, parsed by the workers
// (jsonl_record.h). Binary input is refused before it reaches a tokenizer (binary_input.h):
// every input's magic number when the reader is made, NUL bytes as the text is read. A
// JSONL input that is one JSON array of objects ("[" then "{") is refused with the conversion.
#pragma once

#include <cstdint>
#include <deque>
#include <fstream>
#include <string>
#include <vector>

namespace topotrain::data {

enum class InputFormat { by_extension, text, jsonl };
enum class TextSplit { file, paragraph };

struct RawDocument {
  std::string body;    // the text, or one JSONL line
  bool json = false;   // body is a JSON object
  std::string origin;  // "file" or "file:line", for error messages
};

class CorpusReader {
 public:
  // Throws ConfigError naming the first input that cannot be read, is a binary container or
  // a JSON array.
  CorpusReader(std::vector<std::string> inputs, InputFormat format, TextSplit split);

  // Replaces `batch` with the next documents, about max_bytes of them; returns false when
  // every input has been read.
  bool next_batch(std::vector<RawDocument>& batch, size_t max_bytes);

  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t total_bytes() const { return total_bytes_; }
  size_t num_files() const { return inputs_.size(); }

 private:
  bool is_jsonl(const std::string& path) const;
  void read_text_file(const std::string& path);

  std::vector<std::string> inputs_;
  InputFormat format_;
  TextSplit split_;
  size_t next_input_ = 0;
  std::deque<RawDocument> pending_;  // documents of the text file being read
  std::ifstream jsonl_;  // open while a JSONL file is being read
  std::string jsonl_path_;
  uint64_t jsonl_line_ = 0;
  uint64_t bytes_read_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace topotrain::data
