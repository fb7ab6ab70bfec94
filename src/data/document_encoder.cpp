#include "topotrain/data/document_encoder.h"

namespace topotrain::data {

void encode_text_document(const Tokenizer& tokenizer, std::string_view text, EncodedDocument& out) {
  const std::vector<uint32_t> prefix = tokenizer.document_prefix();
  out.tokens.insert(out.tokens.end(), prefix.begin(), prefix.end());
  tokenizer.encode(text, out.tokens);
  out.tokens.push_back(tokenizer.eos_id());
  out.loss_mask.resize(out.tokens.size(), 1);
}

void encode_chat_document(const Tokenizer& tokenizer, const RenderedChat& chat, EncodedDocument& out) {
  std::vector<ByteRange> spans;
  tokenizer.encode_with_spans(chat.text, out.tokens, spans);
  // Tokens and ranges both run left to right: one pass over each.
  size_t range = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    while (range < chat.assistant.size() && chat.assistant[range].end <= spans[i].begin) ++range;
    const bool trained = range < chat.assistant.size() && chat.assistant[range].begin < spans[i].end;
    out.loss_mask.push_back(trained ? 1 : 0);
  }
}

}  // namespace topotrain::data
