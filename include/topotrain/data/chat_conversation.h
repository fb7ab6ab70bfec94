// One chat conversation of a JSONL line, read as Hugging Face chat templates read it:
//
//   {"messages": [{"role": "...", "content": "...", ...}, ...], "tools": [...]}
//
// Message fields: "role" and "content" (strings, always), "reasoning_content" (string or
// null), "tool_calls" (a list of {"function": {"name", "arguments"}} or {"name",
// "arguments"}; "id" and "type" beside them are ignored), and on "tool" messages
// "tool_call_id" and "name", which no supported template renders. Any other field is
// refused, naming it. "tools" (a list of JSON schemas, or null) is top-level. Whether a
// template uses a field or role is the template's to check (chat_template.h); this only
// reads, keeping JSON values as tojson writes them (python_json.h).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace topotrain::data {

struct ChatToolCall {
  std::string name;
  std::optional<std::string> arguments_text;  // the arguments when they were a JSON string
  std::string arguments_json;                 // tojson of the arguments, whatever their type
};

struct ChatMessage {
  std::string role;
  std::string content;
  std::optional<std::string> reasoning_content;  // absent or null: none given
  std::vector<ChatToolCall> tool_calls;
  bool tool_calls_key = false;  // "tool_calls" was given, even empty or null (Llama 3.1's template tests the key)
};

struct ChatConversation {
  std::vector<ChatMessage> messages;
  std::vector<std::string> tools;           // tojson of each tool schema
  std::vector<std::string> tools_indented;  // tojson(indent=4) of each (Llama 3.1's template)
  bool tools_listed = false;                // "tools" was a list, even an empty one (not null or absent)
};

// `line` is the JSONL object; origin ("file:line") starts every error message.
ChatConversation parse_chat_conversation(const nlohmann::ordered_json& line, const std::string& origin);

}  // namespace topotrain::data
