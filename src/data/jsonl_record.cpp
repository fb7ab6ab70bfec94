#include "topotrain/data/jsonl_record.h"

#include <nlohmann/json.hpp>

#include <vector>

#include "topotrain/core/error.h"

namespace topotrain::data {
namespace {

using Json = nlohmann::ordered_json;

// A record format: the keys that make a line one of it (all of them given) and what it is
// called in messages.
struct Format {
  std::vector<const char*> keys;
  const char* name;
};

const Format kText{{"text"}, "text"};
const Format kMessages{{"messages"}, "messages"};
const Format kShareGpt{{"conversations"}, "ShareGPT"};
const Format kPromptCompletion{{"prompt", "completion"}, "prompt/completion"};
const Format kAlpaca{{"instruction", "output"}, "Alpaca"};
const Format* const kFormats[] = {&kText, &kMessages, &kShareGpt, &kPromptCompletion, &kAlpaca};

// null is how pandas and datasets write a column a row lacks.
bool given(const Json& object, const char* key) { return object.contains(key) && !object.at(key).is_null(); }

std::string quoted_keys(const Format& format) {
  std::string out;
  for (const char* key : format.keys) out += cat(out.empty() ? "" : " and ", "\"", key, "\"");
  return out;
}

// The string at `key`; `where` and `format` name it in the error.
std::string string_field(const Json& object, const char* key, const std::string& where, const char* format) {
  const Json& value = object.at(key);
  if (value.is_string()) return value.get<std::string>();
  throw ConfigError(cat(where, ": \"", key, "\" must be a string (", format, " record), not ", value.type_name(),
                        value.is_null() ? "; write \"\" for none" : ""));
}

void refuse_empty_response(const std::string& response, const std::string& where, const std::string& field) {
  if (!response.empty()) return;
  throw ConfigError(cat(where, ": ", field, " is empty: a response is what the model is trained to write; "
                        "remove the record or give the response"));
}

// The three SFT formats below are plain chat: tools go with "messages" only.
void refuse_tools(const Json& line, const std::string& origin, const char* format) {
  if (!given(line, "tools")) return;
  throw ConfigError(cat(origin, ": \"tools\" is read with \"messages\" records only, not with ", format,
                        " records; write this line as {\"messages\": [...], \"tools\": [...]}"));
}

ChatMessage message(std::string role, std::string content) {
  return ChatMessage{std::move(role), std::move(content), std::nullopt, {}};
}

// The top-level "system" string, if any, as the conversation's first message.
void add_system(const Json& line, const std::string& origin, const char* format, ChatConversation& out) {
  if (!given(line, "system")) return;
  const std::string system = string_field(line, "system", origin, format);
  if (!system.empty()) out.messages.push_back(message("system", system));
}

// ShareGPT's roles; documented in jsonl_record.h, README.md and docs/data.md.
const char* chat_role(const std::string& from) {
  if (from == "human" || from == "user") return "user";
  if (from == "gpt" || from == "assistant") return "assistant";
  if (from == "system") return "system";
  return nullptr;
}

ChatConversation read_sharegpt(const Json& line, const std::string& origin) {
  refuse_tools(line, origin, kShareGpt.name);
  const Json& turns = line.at("conversations");
  if (!turns.is_array() || turns.empty()) {
    throw ConfigError(cat(origin, ": \"conversations\" must be a non-empty list of {\"from\": ..., \"value\": ...} "
                          "(ShareGPT record), not ", turns.is_array() ? "an empty list" : turns.type_name()));
  }
  ChatConversation out;
  add_system(line, origin, kShareGpt.name, out);
  const bool top_system = !out.messages.empty();
  for (size_t i = 0; i < turns.size(); ++i) {
    const std::string where = cat(origin, ": conversations[", i, "]");
    const Json& turn = turns[i];
    if (!turn.is_object()) {
      throw ConfigError(cat(where, " must be an object {\"from\": ..., \"value\": ...}, not ", turn.type_name()));
    }
    if (!turn.contains("from")) throw ConfigError(cat(where, " needs \"from\" (the speaker's role)"));
    if (!turn.contains("value")) throw ConfigError(cat(where, " needs \"value\" (what the speaker says)"));
    const std::string from = string_field(turn, "from", where, kShareGpt.name);
    const char* role = chat_role(from);
    if (!role) {
      throw ConfigError(cat(where, ": \"from\" is \"", from, "\", which is not a ShareGPT role topotrain reads; use "
                            "human or user (-> user), gpt or assistant (-> assistant), or system"));
    }
    const std::string value = string_field(turn, "value", where, kShareGpt.name);
    const bool response = std::string(role) == "assistant";
    if (response) refuse_empty_response(value, where, cat("\"value\" of a \"", from, "\" turn"));
    if (top_system && std::string(role) == "system") {
      throw ConfigError(cat(where, " is a system turn, and the line has a top-level \"system\" too; keep one"));
    }
    for (const auto& [key, field] : turn.items()) {
      if (key == "from" || key == "value") continue;
      // Some ShareGPT sets carry per-turn weights saying what is trained; their default is what topotrain
      // does, and any other weight is refused rather than ignored.
      const bool default_weight = field.is_null() || (field.is_number() && field.get<double>() == (response ? 1 : 0));
      if (key == "weight" && default_weight) continue;
      if (key == "weight") {
        throw ConfigError(cat(where, " has \"weight\": ", field.dump(), ", but topotrain trains every gpt/assistant "
                              "turn (weight 1) and no other (weight 0); drop the turns not to train on"));
      }
      throw ConfigError(cat(where, " has the field \"", key, "\", which is not read (a ShareGPT turn is {\"from\", "
                            "\"value\"}); remove it or fold it into \"value\""));
    }
    out.messages.push_back(message(role, value));
  }
  return out;
}

ChatConversation read_prompt_completion(const Json& line, const std::string& origin) {
  refuse_tools(line, origin, kPromptCompletion.name);
  for (const char* key : {"prompt", "completion"}) {
    if (line.at(key).is_array()) {
      throw ConfigError(cat(origin, ": \"", key, "\" is a list of messages; topotrain reads prompt/completion as "
                            "strings: write this line as {\"messages\": prompt + completion}"));
    }
  }
  ChatConversation out;
  add_system(line, origin, kPromptCompletion.name, out);
  const std::string prompt = string_field(line, "prompt", origin, kPromptCompletion.name);
  const std::string completion = string_field(line, "completion", origin, kPromptCompletion.name);
  refuse_empty_response(completion, origin, "\"completion\"");
  out.messages.push_back(message("user", prompt));
  out.messages.push_back(message("assistant", completion));
  return out;
}

ChatConversation read_alpaca(const Json& line, const std::string& origin) {
  refuse_tools(line, origin, kAlpaca.name);
  ChatConversation out;
  add_system(line, origin, kAlpaca.name, out);
  const std::string instruction = string_field(line, "instruction", origin, kAlpaca.name);
  const std::string input = given(line, "input") ? string_field(line, "input", origin, kAlpaca.name) : "";
  const std::string output = string_field(line, "output", origin, kAlpaca.name);
  refuse_empty_response(output, origin, "\"output\"");
  const char* separator = !instruction.empty() && !input.empty() ? "\n\n" : "";
  out.messages.push_back(message("user", instruction + separator + input));
  out.messages.push_back(message("assistant", output));
  return out;
}

// No format's keys are all given: what a half-given one lacks, else every format.
[[noreturn]] void refuse_unrecognised(const Json& line, const std::string& origin) {
  for (const Format* format : {&kPromptCompletion, &kAlpaca}) {
    for (const char* key : format->keys) {
      if (given(line, key)) continue;
      for (const char* other : format->keys) {
        if (given(line, other)) {
          throw ConfigError(cat(origin, ": \"", other, "\" without \"", key, "\": ", format->name,
                                " records need both ", quoted_keys(*format)));
        }
      }
    }
  }
  std::string keys;
  bool nulls = false;
  for (const auto& [key, value] : line.items()) {
    keys += cat(keys.empty() ? "" : ", ", "\"", key, "\"");
    nulls = nulls || value.is_null();
  }
  throw ConfigError(cat(origin, ": a JSONL line needs a \"text\" string, a \"messages\" list, a \"conversations\" "
                        "list (ShareGPT), \"prompt\" and \"completion\", or \"instruction\" and \"output\" (Alpaca); "
                        "this one has ", keys.empty() ? std::string("no keys") : "the keys " + keys,
                        nulls ? " (a null value counts as absent)" : ""));
}

}  // namespace

JsonlRecord read_jsonl_record(const Json& line, const std::string& origin) {
  if (!line.is_object()) {
    throw ConfigError(cat(origin, ": a JSONL line must be a JSON object ({\"text\": ...}, {\"messages\": [...]}, "
                          "...), not ", line.type_name()));
  }
  const Format* format = nullptr;
  for (const Format* candidate : kFormats) {
    bool all = true;
    for (const char* key : candidate->keys) all = all && given(line, key);
    if (!all) continue;
    if (format) {
      throw ConfigError(cat(origin, ": the line has the keys of two record formats, ", quoted_keys(*format), " (",
                            format->name, ") and ", quoted_keys(*candidate), " (", candidate->name,
                            "); keep one format per line"));
    }
    format = candidate;
  }
  JsonlRecord out;
  if (!format) refuse_unrecognised(line, origin);
  if (format == &kText) {
    out.text = string_field(line, "text", origin, kText.name);
    return out;
  }
  out.chat = true;
  if (format == &kMessages) out.conversation = parse_chat_conversation(line, origin);
  if (format == &kShareGpt) out.conversation = read_sharegpt(line, origin);
  if (format == &kPromptCompletion) out.conversation = read_prompt_completion(line, origin);
  if (format == &kAlpaca) out.conversation = read_alpaca(line, origin);
  return out;
}

}  // namespace topotrain::data
