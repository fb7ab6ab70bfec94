// Renders a chat conversation (chat_conversation.h) as the model's chat template does, as
// text plus the byte ranges the assistant generates (what the loss is taken on).
//
// Which template: chat_template.jinja beside the tokenizer.json, else the "chat_template"
// string of the tokenizer_config.json beside it. Its text is recognised by distinctive
// features (whitespace, trim markers and quote styles do not matter) as one of the families
// rendered natively here, each exactly as Hugging Face's apply_chat_template(messages,
// tools=tools, tokenize=False) renders it for training data (no generation prompt):
//   * Qwen3: empty <think>\n\n</think>\n\n on the last assistant turn; the reasoning
//     (reasoning_content, else a <think>...</think> prefix of content) written only for
//     assistant turns after the last user query; tool calls and tool responses; tools in
//     the system turn.
//   * Qwen2.5: the default system prompt "You are Qwen, created by Alibaba Cloud. You are a
//     helpful assistant." when there is no system message; tool calls (arguments always
//     as JSON) and tool responses; no reasoning (reasoning_content is refused).
// Any other template is refused (ConfigError naming the file and the feature not found).
// With the byte tokenizer, or no template beside the tokenizer.json, the fixed ChatML
// template: <|im_start|>{role}\n{content}<|im_end|>\n for every message, any role, no tools,
// tool calls or reasoning (refused).
//
// Assistant ranges run from right after "<|im_start|>assistant\n" through the closing
// <|im_end|>: reasoning, think block and tool calls are what the model writes.
#pragma once

#include <string>
#include <vector>

#include "topotrain/data/chat_conversation.h"
#include "topotrain/data/tokenizer.h"

namespace topotrain::data {

enum class ChatTemplateFamily { chatml, qwen3, qwen2_5 };

struct RenderedChat {
  std::string text;
  std::vector<ByteRange> assistant;  // in order, not overlapping
};

class ChatTemplate {
 public:
  static ChatTemplate chatml();
  // `text` is a chat_template read from `source` (named in errors).
  static ChatTemplate recognise(const std::string& text, const std::string& source);
  // The template that goes with topotrain-prepare's --tokenizer (see above).
  static ChatTemplate beside_tokenizer(const std::string& tokenizer_spec);

  ChatTemplateFamily family() const { return family_; }
  std::string description() const;  // e.g. "Qwen3 (dir/tokenizer_config.json)"
  // Throws ConfigError, starting with `origin`, for a role or field the template lacks.
  RenderedChat render(const ChatConversation& conversation, const std::string& origin) const;

 private:
  ChatTemplate(ChatTemplateFamily family, std::string source) : family_(family), source_(std::move(source)) {}
  ChatTemplateFamily family_;
  std::string source_;  // the file it came from; "" for the fixed template
};

}  // namespace topotrain::data
