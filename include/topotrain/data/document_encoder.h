// Turns one document into tokens and a loss mask.
//
// Plain text: the tokenizer's document prefix (tokenizer.h), the text's tokens, then eos, all
// with loss mask 1.
// Chat: the rendered conversation (chat_template.h) is tokenized as one string, special
// tokens matched as HF matches them, so the ids are those of HF's tokenizer on the same text.
// A token gets mask 1 when any of its bytes lies in an assistant range, as HF's
// return_assistant_tokens_mask marks every token holding a character of a generation
// block; so a token straddling a boundary (e.g. "\n\n" made of the header's newline and the
// content's first) is trained. No eos is appended: <|im_end|> ends a conversation.
#pragma once

#include <string_view>
#include <vector>

#include "topotrain/data/chat_template.h"
#include "topotrain/data/tokenizer.h"

namespace topotrain::data {

struct EncodedDocument {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> loss_mask;  // one entry per token
};

void encode_text_document(const Tokenizer& tokenizer, std::string_view text, EncodedDocument& out);
void encode_chat_document(const Tokenizer& tokenizer, const RenderedChat& chat, EncodedDocument& out);

}  // namespace topotrain::data
