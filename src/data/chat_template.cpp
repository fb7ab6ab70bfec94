#include "topotrain/data/chat_template.h"

#include "topotrain/core/error.h"

namespace topotrain::data {
namespace {

uint32_t require_special(const Tokenizer& tokenizer, const char* content) {
  const auto id = tokenizer.special_token(content);
  if (!id) {
    throw ConfigError(cat("tokenizer ", tokenizer.description(), " has no ", content,
                          " token; chat data needs a Qwen-style tokenizer (or the byte tokenizer)"));
  }
  return *id;
}

void append(const Tokenizer& tokenizer, std::string_view text, uint8_t mask, EncodedDocument& out) {
  tokenizer.encode(text, out.tokens);
  out.loss_mask.resize(out.tokens.size(), mask);
}

}  // namespace

void encode_text_document(const Tokenizer& tokenizer, std::string_view text, EncodedDocument& out) {
  append(tokenizer, text, 1, out);
  out.tokens.push_back(tokenizer.eos_id());
  out.loss_mask.push_back(1);
}

void encode_chat_document(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                          EncodedDocument& out) {
  const uint32_t im_start = require_special(tokenizer, "<|im_start|>");
  const uint32_t im_end = require_special(tokenizer, "<|im_end|>");
  for (const ChatMessage& message : messages) {
    const uint8_t trained = message.role == "assistant" ? 1 : 0;
    out.tokens.push_back(im_start);
    out.loss_mask.push_back(0);
    append(tokenizer, message.role + "\n", 0, out);
    append(tokenizer, message.content, trained, out);
    out.tokens.push_back(im_end);
    out.loss_mask.push_back(trained);
    append(tokenizer, "\n", 0, out);
  }
}

}  // namespace topotrain::data
