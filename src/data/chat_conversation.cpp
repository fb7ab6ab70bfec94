#include "topotrain/data/chat_conversation.h"

#include <nlohmann/json.hpp>

#include "topotrain/core/error.h"
#include "topotrain/data/python_json.h"

namespace topotrain::data {
namespace {

using Json = nlohmann::ordered_json;

std::string require_string(const Json& object, const char* key, const std::string& where) {
  if (!object.contains(key) || !object[key].is_string()) {
    throw ConfigError(cat(where, " needs a \"", key, "\" string",
                          object.contains(key) && object[key].is_null() ? " (null given; write \"\" for none)" : ""));
  }
  return object[key].get<std::string>();
}

ChatToolCall parse_tool_call(const Json& call, const std::string& where) {
  if (!call.is_object()) throw ConfigError(cat(where, " is not an object"));
  for (const auto& [key, value] : call.items()) {
    if (key != "function" && key != "name" && key != "arguments" && key != "id" && key != "type") {
      throw ConfigError(cat(where, " has the field \"", key,
                            "\", which no supported chat template renders (a tool call is {\"function\": "
                            "{\"name\", \"arguments\"}})"));
    }
  }
  const Json& function = call.contains("function") ? call["function"] : call;
  const std::string at = call.contains("function") ? where + ".function" : where;
  if (!function.is_object()) throw ConfigError(cat(at, " is not an object"));
  ChatToolCall out;
  out.name = require_string(function, "name", at);
  if (!function.contains("arguments")) throw ConfigError(cat(at, " needs \"arguments\""));
  const Json& arguments = function["arguments"];
  if (arguments.is_string()) out.arguments_text = arguments.get<std::string>();
  out.arguments_json = python_json_dumps(arguments);
  return out;
}

ChatMessage parse_message(const Json& m, const std::string& where) {
  if (!m.is_object()) throw ConfigError(cat(where, " is not an object"));
  ChatMessage out;
  out.role = require_string(m, "role", where);
  out.content = require_string(m, "content", where);
  for (const auto& [key, value] : m.items()) {
    if (key == "role" || key == "content") continue;
    if (key == "reasoning_content") {
      if (value.is_string()) {
        out.reasoning_content = value.get<std::string>();
      } else if (!value.is_null()) {
        throw ConfigError(cat(where, ": \"reasoning_content\" must be a string or null"));
      }
    } else if (key == "tool_calls") {
      out.tool_calls_key = true;
      if (value.is_null()) continue;
      if (!value.is_array()) throw ConfigError(cat(where, ": \"tool_calls\" must be a list"));
      for (size_t i = 0; i < value.size(); ++i) {
        out.tool_calls.push_back(parse_tool_call(value[i], cat(where, ".tool_calls[", i, "]")));
      }
    } else if ((key == "tool_call_id" || key == "name") && out.role == "tool") {
      // OpenAI-style bookkeeping that the templates do not render (nor does HF).
    } else {
      throw ConfigError(cat(where, " (role \"", out.role, "\") has the field \"", key,
                            "\", which no supported chat template renders; remove it or fold it into \"content\""));
    }
  }
  return out;
}

}  // namespace

ChatConversation parse_chat_conversation(const Json& line, const std::string& origin) {
  const Json& messages = line.at("messages");
  if (!messages.is_array() || messages.empty()) {
    throw ConfigError(cat(origin, ": \"messages\" must be a non-empty list of {\"role\", \"content\"}"));
  }
  ChatConversation out;
  for (size_t i = 0; i < messages.size(); ++i) {
    out.messages.push_back(parse_message(messages[i], cat(origin, ": messages[", i, "]")));
  }
  if (line.contains("tools") && !line["tools"].is_null()) {
    const Json& tools = line["tools"];
    if (!tools.is_array()) throw ConfigError(cat(origin, ": \"tools\" must be a list of tool schemas"));
    out.tools_listed = true;
    for (const Json& tool : tools) {
      out.tools.push_back(python_json_dumps(tool));
      out.tools_indented.push_back(python_json_dumps(tool, 4));
    }
  }
  return out;
}

}  // namespace topotrain::data
