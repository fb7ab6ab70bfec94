// One line of a JSONL input to topotrain-prepare, read as one of the record formats that
// text and SFT data ship in. Every chat format becomes the ChatConversation a "messages"
// record would be, so that one path renders it with the chat template, tokenizes it and
// puts the loss mask on the assistant turns (chat_template.h, document_encoder.h):
//
//   format            | keys                                  | becomes
//   text              | "text"                                | a text document
//   messages          | "messages", "tools"                   | as chat_conversation.h reads it
//   ShareGPT          | "conversations": [{"from", "value"}]  | a message per turn: from human|user -> user,
//                     |                                       | gpt|assistant -> assistant, system -> system
//   prompt/completion | "prompt", "completion" (strings)      | user: prompt; assistant: completion
//   Alpaca            | "instruction", "input", "output"      | user: instruction and input joined by "\n\n"
//                     |                                       | (just the non-empty one when the other is "",
//                     |                                       | null or absent); assistant: output
//
// The last three also take a top-level "system" string: a system message first ("" or null:
// none). A line is of the format whose required keys it has ("text"; "messages";
// "conversations"; "prompt" and "completion"; "instruction" and "output"), a key whose value
// is null counting as absent; other keys (ids, sources, ultrachat's "prompt" beside its
// "messages") are ignored, as they always were.
//
// Refused with a ConfigError that starts with `origin` ("file:line") and names the field:
// keys of two formats (naming both), keys of none (naming what a half-given format lacks,
// else the formats), a value of the wrong type, a ShareGPT role outside the five above, an
// empty response (a gpt/assistant "value", "completion" or "output" that is ""), a ShareGPT
// turn field other than from/value (a "weight" only where it is not the default: null, or 1
// on responses and 0 on other turns, since weights would change what is trained), "system"
// both at the top and as a turn, and "tools" on a format other than messages.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>

#include "topotrain/data/chat_conversation.h"

namespace topotrain::data {

struct JsonlRecord {
  bool chat = false;              // true: `conversation`; false: `text`
  std::string text;
  ChatConversation conversation;
};

// `line` is one parsed JSONL line, any JSON value (a non-object is refused).
JsonlRecord read_jsonl_record(const nlohmann::ordered_json& line, const std::string& origin);

}  // namespace topotrain::data
