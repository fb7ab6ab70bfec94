#include "topotrain/data/prepare.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <future>
#include <optional>
#include <system_error>
#include <thread>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/log.h"
#include "topotrain/data/chat_template.h"
#include "topotrain/data/document_encoder.h"
#include "topotrain/data/jsonl_record.h"
#include "topotrain/data/tokenizer.h"
#include "topotrain/data/tokenizer_files.h"

namespace topotrain::data {
namespace {

struct TokenizedBatch {
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> lengths;
  std::vector<uint8_t> loss_mask;
  uint64_t loss_tokens = 0;
  uint64_t loss_targets = 0;
  uint64_t chat_documents = 0;
  uint64_t text_bytes = 0;  // of the raw documents, for the progress bar
};

// The chat template, or why there is none: a template topotrain cannot render is refused
// only when a conversation needs it, so plain text still prepares with that tokenizer.
struct ChatRendering {
  std::optional<ChatTemplate> chat_template;
  std::string refusal;
};

// nlohmann's parse_error reads "[json.exception.parse_error.101] parse error at line 1,
// column 14: <what>"; a JSONL line is one line, so the column and <what> are what helps.
// <what> quotes the token read so far, which for an unterminated string is the rest of the
// line: it is cut short.
std::string json_parse_detail(const nlohmann::json::parse_error& e) {
  const std::string what = e.what();
  const size_t column = what.find("column ");
  const size_t colon = column == std::string::npos ? std::string::npos : what.find(": ", column);
  std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
  constexpr size_t kLongest = 160;
  if (detail.size() > kLongest) detail = detail.substr(0, kLongest) + "...";
  return cat("invalid JSON at column ", e.byte, ": ", detail);
}

// Returns whether the document is a conversation.
bool encode_document(const Tokenizer& tokenizer, const ChatRendering& chat, const RawDocument& doc,
                     EncodedDocument& out) {
  if (!doc.json) {
    encode_text_document(tokenizer, doc.body, out);
    return false;
  }
  // Ordered: tools and tool-call arguments are written back in the order they were given.
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(doc.body);
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError(cat(doc.origin, ": ", json_parse_detail(e)));
  }
  const JsonlRecord record = read_jsonl_record(j, doc.origin);
  if (record.chat) {
    if (!chat.chat_template) throw ConfigError(cat(doc.origin, ": chat data, but ", chat.refusal));
    encode_chat_document(tokenizer, chat.chat_template->render(record.conversation, doc.origin), out);
    return true;
  }
  if (record.text.find_first_not_of(" \t\r\n") != std::string::npos) encode_text_document(tokenizer, record.text, out);
  return false;
}

TokenizedBatch tokenize(const Tokenizer& tokenizer, const ChatRendering& chat, const std::vector<RawDocument>& docs) {
  TokenizedBatch batch;
  EncodedDocument doc;
  for (const RawDocument& raw : docs) {
    batch.text_bytes += raw.body.size();
    doc.tokens.clear();
    doc.loss_mask.clear();
    try {
      if (encode_document(tokenizer, chat, raw, doc)) ++batch.chat_documents;
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& e) {
      throw ConfigError(cat(raw.origin, ": ", e.what()));
    }
    if (doc.tokens.empty()) continue;
    batch.tokens.insert(batch.tokens.end(), doc.tokens.begin(), doc.tokens.end());
    batch.loss_mask.insert(batch.loss_mask.end(), doc.loss_mask.begin(), doc.loss_mask.end());
    batch.lengths.push_back(doc.tokens.size());
    uint64_t ones = 0;
    for (uint8_t m : doc.loss_mask) ones += m;
    batch.loss_tokens += ones;
    batch.loss_targets += ones - doc.loss_mask.front();  // nothing predicts a document's first token
  }
  return batch;
}

// Progress counts the text already tokenized and written (blank lines between paragraphs
// are not part of any document, so the bar may jump at the end).
void draw_progress(uint64_t done_bytes, uint64_t total_bytes, const PrepareTotals& totals, double seconds) {
  const double fraction = total_bytes ? std::min(1.0, double(done_bytes) / double(total_bytes)) : 1.0;
  const int width = 30, filled = static_cast<int>(fraction * width);
  std::fprintf(stderr, "\r[%s%s] %5.1f%%  %.1f / %.1f MB  %llu docs  %llu tokens  %s ",
               std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), 100 * fraction,
               done_bytes / 1e6, total_bytes / 1e6, (unsigned long long)totals.documents,
               (unsigned long long)totals.tokens, format_rate(seconds > 0 ? totals.tokens / seconds : 0.0).c_str());
  std::fflush(stderr);
}

}  // namespace

PrepareTotals prepare_dataset(const PrepareConfig& config) {
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(config.tokenizer, config.eos);
  ChatRendering chat;
  try {
    chat.chat_template = ChatTemplate::beside_tokenizer(config.tokenizer);
  } catch (const ConfigError& e) {
    chat.refusal = e.what();
  }
  CorpusReader reader(config.inputs, config.format, config.split);
  // After the inputs are checked, so that a refused input leaves no new folder behind.
  try {
    make_directories(parent_directory(config.output));
  } catch (const std::system_error& e) {
    throw ConfigError(cat("cannot write '", config.output, "': ", e.what()));
  }
  TokenDatasetWriter writer(config.output, tokenizer->vocab_size(), tokenizer->eos_id(), tokenizer->description(),
                            config.write);
  // The tokenizer travels with its tokens (tokenizer_files.h); the byte tokenizer has no files.
  if (config.tokenizer != "byte") writer.set_tokenizer_files(read_tokenizer_files(config.tokenizer));
  const size_t workers = config.threads > 0 ? size_t(config.threads) : std::max(1u, std::thread::hardware_concurrency());

  PrepareTotals totals;
  totals.files = reader.num_files();
  totals.vocab_size = tokenizer->vocab_size();
  totals.tokenizer = tokenizer->description();
  totals.chat_template = chat.chat_template ? chat.chat_template->description() : "none (" + chat.refusal + ")";
  std::deque<std::future<TokenizedBatch>> in_flight;
  uint64_t done_bytes = 0;
  const auto write_oldest = [&] {
    TokenizedBatch batch = in_flight.front().get();
    in_flight.pop_front();
    writer.append(batch.tokens, batch.lengths, batch.loss_mask);
    totals.documents += batch.lengths.size();
    totals.tokens += batch.tokens.size();
    totals.loss_tokens += batch.loss_tokens;
    totals.loss_targets += batch.loss_targets;
    totals.chat_documents += batch.chat_documents;
    done_bytes += batch.text_bytes;
    if (config.progress) draw_progress(done_bytes, reader.total_bytes(), totals, elapsed());
  };
  std::vector<RawDocument> docs;
  // Batches are written in the order they were read, so the file does not depend on
  // the number of threads.
  while (reader.next_batch(docs, config.batch_bytes)) {
    if (docs.empty()) continue;
    in_flight.push_back(std::async(std::launch::async, [&tokenizer, &chat, batch = std::move(docs)] {
      return tokenize(*tokenizer, chat, batch);
    }));
    docs = {};
    if (in_flight.size() >= workers) write_oldest();
  }
  while (!in_flight.empty()) write_oldest();
  if (totals.documents == 0) {
    throw ConfigError(cat("the inputs hold no documents (all empty?); nothing written to '", config.output, "'"));
  }
  if (totals.loss_targets == 0) {
    // Text documents end with eos, all trained: only conversations without an assistant
    // message get here.
    throw ConfigError(cat("nothing written to '", config.output, "': it would have ",
                          no_loss_targets_reason(totals.documents, totals.tokens, totals.loss_tokens),
                          "; loss mask 1 goes to what messages of role \"assistant\" say, and none of the ",
                          totals.chat_documents, " conversations has one (another role, even a misspelt one, is "
                          "rendered but not trained)"));
  }
  writer.finish();
  if (config.progress) {
    draw_progress(reader.total_bytes(), reader.total_bytes(), totals, elapsed());
    std::fputc('\n', stderr);
  }
  totals.bytes = reader.bytes_read();
  totals.seconds = elapsed();
  return totals;
}

}  // namespace topotrain::data
