// Turns one document into tokens and a loss mask.
//
// Plain text: the text's tokens then eos, all with loss mask 1.
// Chat (Qwen template): for each message
//     <|im_start|>{role}\n{content}<|im_end|>\n
// where the content of assistant messages and the <|im_end|> closing them get mask 1
// (the model learns what to answer and when to stop) and everything else 0. Each part is
// encoded on its own, so a role name never merges with its content.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "topotrain/data/tokenizer.h"

namespace topotrain::data {

struct ChatMessage {
  std::string role;
  std::string content;
};

struct EncodedDocument {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> loss_mask;  // one entry per token
};

void encode_text_document(const Tokenizer& tokenizer, std::string_view text, EncodedDocument& out);
void encode_chat_document(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                          EncodedDocument& out);

}  // namespace topotrain::data
