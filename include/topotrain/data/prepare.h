// topotrain-prepare's pipeline: read documents -> tokenize on worker threads -> append to
// a dataset file in input order. The reading thread stays ahead of the workers by at most
// `threads` batches, so memory stays bounded whatever the corpus size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topotrain/data/corpus_reader.h"
#include "topotrain/data/token_dataset.h"

namespace topotrain::data {

struct PrepareConfig {
  std::vector<std::string> inputs;
  std::string output;
  std::string tokenizer = "byte";  // "byte" or a tokenizer.json path; chat data is rendered with
                                   // the chat template beside it (chat_template.h)
  std::string eos;                 // end-of-document token content for tokenizer.json ("" = <|endoftext|>)
  InputFormat format = InputFormat::by_extension;
  TextSplit split = TextSplit::file;
  int threads = 0;                 // 0: every core
  size_t batch_bytes = 1 << 20;    // raw text per work item
  WriteOptions write;
  bool progress = false;           // redraw a progress bar on stderr
};

struct PrepareTotals {
  uint64_t files = 0;
  uint64_t documents = 0;
  uint64_t tokens = 0;
  uint64_t loss_tokens = 0;
  uint64_t loss_targets = 0;    // tokens with loss mask 1 after the first of their document
  uint64_t chat_documents = 0;  // of `documents`
  uint64_t bytes = 0;
  double seconds = 0;
  uint64_t vocab_size = 0;
  std::string tokenizer;
  std::string chat_template;  // ChatTemplate::description(), or why chat data is refused
};

// Throws ConfigError naming the input (file:line for JSONL) or the output, and writes
// nothing, for unreadable or malformed inputs and for output with no next-token target
// (TokenDataset::load would refuse it).
PrepareTotals prepare_dataset(const PrepareConfig& config);

}  // namespace topotrain::data
