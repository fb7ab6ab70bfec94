#include "chat_renderers.h"

#include <algorithm>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "topotrain/core/error.h"
#include "topotrain/data/python_json.h"

namespace topotrain::data::detail {
namespace {

constexpr const char* kQwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// Python's str.lstrip('\n'), rstrip('\n') and strip('\n'), which the Qwen3 template applies.
std::string lstrip_newlines(const std::string& s) {
  const size_t first = s.find_first_not_of('\n');
  return first == std::string::npos ? std::string() : s.substr(first);
}
std::string rstrip_newlines(const std::string& s) {
  const size_t last = s.find_last_not_of('\n');
  return last == std::string::npos ? std::string() : s.substr(0, last + 1);
}
std::string strip_newlines(const std::string& s) { return lstrip_newlines(rstrip_newlines(s)); }

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The text being rendered and the assistant ranges marked in it so far.
class ChatWriter {
 public:
  void add(const std::string& s) { chat_.text += s; }
  // The assistant's bytes start `after` bytes from here (past the header's newline).
  void begin_assistant(size_t after) { begin_ = chat_.text.size() + after; }
  // `end` (<|im_end|>) closes the assistant's range; `after` (a newline) is the template's.
  void close_assistant(const char* end = "<|im_end|>", const char* after = "\n") {
    chat_.text += end;
    chat_.assistant.push_back({begin_, chat_.text.size()});
    chat_.text += after;
  }
  RenderedChat take() { return std::move(chat_); }

 private:
  RenderedChat chat_;
  size_t begin_ = 0;
};

void refuse(const std::string& origin, size_t index, const std::string& what, const std::string& fix) {
  throw ConfigError(cat(origin, ": messages[", index, "]: ", what, "; ", fix));
}

// The roles and fields both Qwen templates render; `reasoning`: whether reasoning_content is.
void check_qwen_message(const ChatMessage& m, size_t index, const std::string& family, bool reasoning,
                        const std::string& origin) {
  if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
    refuse(origin, index, cat("role \"", m.role, "\" is not rendered by the ", family, " chat template"),
           "use system, user, assistant or tool");
  }
  if (!m.tool_calls.empty() && m.role != "assistant") {
    refuse(origin, index, cat("\"tool_calls\" on a ", m.role, " message"), "only assistant messages make tool calls");
  }
  if (m.reasoning_content && (!reasoning || m.role != "assistant")) {
    refuse(origin, index,
           reasoning ? cat("\"reasoning_content\" on a ", m.role, " message")
                     : cat("\"reasoning_content\" is not rendered by the ", family, " chat template"),
           reasoning ? "only assistant messages reason" : "remove it (the model would never see it)");
  }
}

// The system turn listing the tools, as both Qwen templates write it; `prefix` precedes "# Tools".
void add_tools_system(ChatWriter& out, const std::string& prefix, const std::vector<std::string>& tools) {
  out.add("<|im_start|>system\n" + prefix +
          "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
          "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
  for (const std::string& tool : tools) out.add("\n" + tool);
  out.add("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
          "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
          "<args-json-object>}\n</tool_call><|im_end|>\n");
}

void add_tool_call(ChatWriter& out, const ChatToolCall& call, const std::string& arguments) {
  out.add("<tool_call>\n{\"name\": \"" + call.name + "\", \"arguments\": " + arguments + "}\n</tool_call>");
}

// Consecutive tool messages share one user turn, each response in <tool_response> tags.
void add_tool_response(ChatWriter& out, const std::vector<ChatMessage>& messages, size_t i) {
  if (i == 0 || messages[i - 1].role != "tool") out.add("<|im_start|>user");
  out.add("\n<tool_response>\n" + messages[i].content + "\n</tool_response>");
  if (i + 1 == messages.size() || messages[i + 1].role != "tool") out.add("<|im_end|>\n");
}

// Python's str.isspace(), by its definition: general category Zs, or bidirectional class WS,
// B or S (utf8proc's tables).
bool python_space(utf8proc_int32_t c) {
  const utf8proc_property_t* p = utf8proc_get_property(c);
  return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

// Python's str.strip(), which Jinja's trim filter is: white space off both ends.
std::string trim(const std::string& s) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  size_t begin = s.size(), end = 0;  // the first and past the last code point that is not space
  for (size_t at = 0; at < s.size();) {
    utf8proc_int32_t c = -1;
    const utf8proc_ssize_t n = utf8proc_iterate(bytes + at, static_cast<utf8proc_ssize_t>(s.size() - at), &c);
    const size_t length = n > 0 ? static_cast<size_t>(n) : 1;
    if (!python_space(c)) {
      begin = std::min(begin, at);
      end = at + length;
    }
    at += length;
  }
  return begin < end ? s.substr(begin, end - begin) : std::string();
}

void add_turn(ChatWriter& out, const ChatMessage& m) {
  out.add("<|im_start|>" + m.role + "\n");
  if (m.role != "assistant") {
    out.add(m.content + "<|im_end|>\n");
    return;
  }
  out.begin_assistant(0);
  out.add(m.content);
  out.close_assistant();
}

}  // namespace

RenderedChat render_chatml(const ChatConversation& conversation, const std::string& origin) {
  const std::string fix =
      "the fixed template has no place for it: put a tokenizer_config.json with a Qwen3 or Qwen2.5 chat_template "
      "beside the tokenizer.json";
  if (!conversation.tools.empty()) throw ConfigError(cat(origin, ": \"tools\" given; ", fix));
  ChatWriter out;
  for (size_t i = 0; i < conversation.messages.size(); ++i) {
    const ChatMessage& m = conversation.messages[i];
    if (m.reasoning_content) refuse(origin, i, "\"reasoning_content\" given", fix);
    if (!m.tool_calls.empty()) refuse(origin, i, "\"tool_calls\" given", fix);
    add_turn(out, m);
  }
  return out.take();
}

RenderedChat render_qwen3(const ChatConversation& conversation, const std::string& origin) {
  const std::vector<ChatMessage>& messages = conversation.messages;
  for (size_t i = 0; i < messages.size(); ++i) check_qwen_message(messages[i], i, "Qwen3", true, origin);
  ChatWriter out;
  const bool leading_system = messages[0].role == "system";
  if (!conversation.tools.empty()) {
    add_tools_system(out, leading_system ? messages[0].content + "\n\n" : "", conversation.tools);
  } else if (leading_system) {
    out.add("<|im_start|>system\n" + messages[0].content + "<|im_end|>\n");
  }
  // Reasoning is kept only after the last user query (a user turn that is not just a
  // wrapped tool response); with none, after the last message.
  size_t last_query = messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" && !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      add_turn(out, m);
    } else if (m.role == "assistant") {
      std::string content = m.content, reasoning;
      if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
      } else if (const size_t close = content.find("</think>"); close != std::string::npos) {
        const std::string before = rstrip_newlines(content.substr(0, close));
        const size_t open = before.rfind("<think>");
        reasoning = lstrip_newlines(open == std::string::npos ? before : before.substr(open + 7));
        content = lstrip_newlines(content.substr(content.rfind("</think>") + 8));
      }
      out.add("<|im_start|>assistant\n");
      out.begin_assistant(0);
      if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
        out.add("<think>\n" + strip_newlines(reasoning) + "\n</think>\n\n" + lstrip_newlines(content));
      } else {
        out.add(content);
      }
      for (size_t c = 0; c < m.tool_calls.size(); ++c) {
        if (c > 0 || !content.empty()) out.add("\n");
        const ChatToolCall& call = m.tool_calls[c];
        add_tool_call(out, call, call.arguments_text ? *call.arguments_text : call.arguments_json);
      }
      out.close_assistant();
    } else if (m.role == "tool") {
      add_tool_response(out, messages, i);
    }
  }
  return out.take();
}

RenderedChat render_qwen2_5(const ChatConversation& conversation, const std::string& origin) {
  const std::vector<ChatMessage>& messages = conversation.messages;
  for (size_t i = 0; i < messages.size(); ++i) check_qwen_message(messages[i], i, "Qwen2.5", false, origin);
  ChatWriter out;
  const std::string system = messages[0].role == "system" ? messages[0].content : kQwenDefaultSystem;
  if (!conversation.tools.empty()) {
    add_tools_system(out, system + "\n\n", conversation.tools);
  } else {
    out.add("<|im_start|>system\n" + system + "<|im_end|>\n");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || (m.role == "system" && i > 0) || (m.role == "assistant" && m.tool_calls.empty())) {
      add_turn(out, m);
    } else if (m.role == "assistant") {
      // Every part after the header starts with its own newline.
      out.add("<|im_start|>assistant");
      out.begin_assistant(1);
      if (!m.content.empty()) out.add("\n" + m.content);
      for (const ChatToolCall& call : m.tool_calls) {
        out.add("\n");
        add_tool_call(out, call, call.arguments_json);
      }
      out.close_assistant();
    } else if (m.role == "tool") {
      add_tool_response(out, messages, i);
    }
  }
  return out.take();
}

RenderedChat render_llama3(const ChatConversation& conversation, const std::string& origin,
                           const std::string& bos_token) {
  const std::vector<ChatMessage>& messages = conversation.messages;
  const std::string raises = "the Llama 3.1 chat template raises: ";
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool" && m.role != "ipython") {
      refuse(origin, i, cat("role \"", m.role, "\" is not rendered by the Llama 3.1 chat template"),
             "use system, user, assistant or tool (ipython)");
    }
    if (m.reasoning_content) {
      refuse(origin, i, "\"reasoning_content\" is not rendered by the Llama 3.1 chat template",
             "remove it (the model would never see it)");
    }
    if (!m.tool_calls_key) continue;
    if (m.role != "assistant") {
      refuse(origin, i, cat("\"tool_calls\" on a ", m.role, " message"), "only assistant messages make tool calls");
    }
    if (m.tool_calls.size() != 1) {
      refuse(origin, i,
             cat(m.tool_calls.size(), " tool calls; ", raises, "This model only supports single tool-calls at once!"),
             "give exactly one call a message (drop an empty or null \"tool_calls\")");
    }
    if (!m.content.empty()) {
      refuse(origin, i, "\"content\" beside \"tool_calls\": the Llama 3.1 chat template writes only the call",
             "write \"\" as the content, or put the text in an assistant message of its own");
    }
  }
  ChatWriter out;
  out.add(bos_token);
  size_t next = 0;
  std::string system;
  if (messages[0].role == "system") {
    system = trim(messages[0].content);
    next = 1;
  }
  out.add("<|start_header_id|>system<|end_header_id|>\n\n");
  if (conversation.tools_listed) out.add("Environment: ipython\n");
  out.add("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" + system + "<|eot_id|>");
  if (conversation.tools_listed) {
    if (next == messages.size()) {
      throw ConfigError(cat(origin, ": tools but no message after the system message; ", raises,
                            "Cannot put tools in the first user message when there's no first user message!"));
    }
    if (messages[next].role != "user" || messages[next].tool_calls_key) {
      refuse(origin, next, cat("a ", messages[next].role, " message where the Llama 3.1 chat template puts the tools "
                               "into the first user message"),
             "start the conversation (after the system message) with a user message");
    }
    out.add("<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON "
            "for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the "
            "format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use "
            "variables.\n\n");
    for (const std::string& tool : conversation.tools_indented) out.add(tool + "\n\n");
    out.add(trim(messages[next].content) + "<|eot_id|>");
    ++next;
  }
  for (size_t i = next; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool" || m.role == "ipython") {
      // The content is a string, which Jinja counts as iterable: the template writes it as JSON.
      out.add("<|start_header_id|>ipython<|end_header_id|>\n\n" + python_json_dumps(nlohmann::ordered_json(m.content)) +
              "<|eot_id|>");
      continue;
    }
    out.add("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
    if (m.role != "assistant") {
      out.add(trim(m.content) + "<|eot_id|>");
      continue;
    }
    out.begin_assistant(0);
    if (m.tool_calls_key) {
      const ChatToolCall& call = m.tool_calls[0];
      out.add("{\"name\": \"" + call.name + "\", \"parameters\": " + call.arguments_json + "}");
    } else {
      out.add(trim(m.content));
    }
    out.close_assistant("<|eot_id|>", "");
  }
  return out.take();
}

}  // namespace topotrain::data::detail
