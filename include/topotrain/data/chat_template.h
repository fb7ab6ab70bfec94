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
//   * Llama 3.1: bos_token (tokenizer_config.json's) first;
//     the system turn "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
//     (date_string at its default; "Environment: ipython\n" before it when tools are given)
//     then the trimmed system message; with tools, the first user turn lists them
//     (tojson(indent=4)) before its content (tools_in_user_message at its default); turns
//     <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>; an assistant
//     turn with tool_calls is exactly one call written {"name": ..., "parameters": ...};
//     tool (or ipython) messages are ipython turns of the content as a JSON string. What it
//     raises for (tools without a user message, other than one tool call) is refused with
//     its message; so are content beside a tool call (the template drops it),
//     reasoning_content, a non-user first message under tools and roles other than system,
//     user, assistant, tool and ipython. Refused by name in the template: strftime_now
//     (today's date, as Llama 3.2's writes) and <|image|>. builtin_tools, custom_tools and
//     date_string are template arguments, not data: they keep their defaults, so
//     <|python_tag|> and <|eom_id|> calls are never written.
// Any other template is refused (ConfigError naming the file and the feature not found).
// With the byte tokenizer, or no template beside the tokenizer.json, the fixed ChatML
// template: <|im_start|>{role}\n{content}<|im_end|>\n for every message, any role, no tools,
// tool calls or reasoning (refused).
//
// Assistant ranges run from right after "<|im_start|>assistant\n" through the closing
// <|im_end|> (Llama: after "<|start_header_id|>assistant<|end_header_id|>\n\n" through
// <|eot_id|>): reasoning, think block and tool calls are what the model writes.
#pragma once

#include <string>
#include <vector>

#include "topotrain/data/chat_conversation.h"
#include "topotrain/data/tokenizer.h"

namespace topotrain::data {

enum class ChatTemplateFamily { chatml, qwen3, qwen2_5, llama3 };

struct RenderedChat {
  std::string text;
  std::vector<ByteRange> assistant;  // in order, not overlapping
};

class ChatTemplate {
 public:
  static ChatTemplate chatml();
  // `text` is a chat_template read from `source` (named in errors); `bos_token`: the
  // tokenizer_config.json's, which Llama's template writes ("" when it names none).
  static ChatTemplate recognise(const std::string& text, const std::string& source,
                                const std::string& bos_token = "");
  // The template that goes with topotrain-prepare's --tokenizer (see above).
  static ChatTemplate beside_tokenizer(const std::string& tokenizer_spec);

  ChatTemplateFamily family() const { return family_; }
  std::string description() const;  // e.g. "Qwen3 (dir/tokenizer_config.json)"
  // Throws ConfigError, starting with `origin`, for a role or field the template lacks.
  RenderedChat render(const ChatConversation& conversation, const std::string& origin) const;

 private:
  ChatTemplate(ChatTemplateFamily family, std::string source, std::string bos_token = "")
      : family_(family), source_(std::move(source)), bos_token_(std::move(bos_token)) {}
  ChatTemplateFamily family_;
  std::string source_;     // the file it came from; "" for the fixed template
  std::string bos_token_;  // Llama's, written first
};

}  // namespace topotrain::data
