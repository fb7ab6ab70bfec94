#include "topotrain/data/chat_template.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <fstream>
#include <sstream>

#include "chat_renderers.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"

namespace topotrain::data {
namespace {

// The template without whitespace and Jinja's trim markers, double quotes as single ones:
// what two spellings of the same template have in common.
std::string canonical(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    out += c == '"' ? '\'' : c;
  }
  for (const char* marker : {"{%-", "-%}", "{{-", "-}}"}) {
    const std::string m = marker, plain = m[0] == '-' ? m.substr(1) : m.substr(0, 2);
    for (size_t at = out.find(m); at != std::string::npos; at = out.find(m, at)) out.replace(at, m.size(), plain);
  }
  return out;
}

struct Feature {
  const char* text;  // in canonical form
  const char* what;  // for the error message
};

// What makes a template render as Qwen3's: each is a behaviour render_qwen3 reproduces.
const Feature kQwen3Features[] = {
    {"<|im_start|>", "<|im_start|> turns"},
    {"<|im_end|>", "<|im_end|> turns"},
    {"reasoning_content", "a reasoning_content field"},
    {"last_query_index", "reasoning kept only after the last user query (last_query_index)"},
    {R"('\n<think>\n'+reasoning_content.strip('\n')+'\n</think>\n\n')", "the <think>\\n...\\n</think>\\n\\n block"},
    {"loop.lastor(notloop.lastandreasoning_content)", "a think block on the last turn even when empty"},
    {"<tool_call>", "<tool_call> tags"},
    {"tool_call.argumentsisstring", "string tool-call arguments written as they are"},
    {"<tool_response>", "<tool_response> tags"},
};

// Qwen2.5's: ChatML turns, its default system prompt, tool calls and responses, no reasoning.
const Feature kQwen2_5Features[] = {
    {"<|im_start|>", "<|im_start|> turns"},
    {"<|im_end|>", "<|im_end|> turns"},
    {"YouareQwen,createdbyAlibabaCloud.Youareahelpfulassistant.", "Qwen2.5's default system prompt"},
    {"<tool_call>", "<tool_call> tags"},
    {"tojson", "tool-call arguments written with tojson"},
    {"<tool_response>", "<tool_response> tags"},
};

// Llama 3.1's: header turns, the dated system turn, tools in the first user
// turn, one JSON tool call a turn, tool responses in the ipython role.
const Feature kLlama3Features[] = {
    {"{{bos_token}}", "the bos_token written first"},
    {"'<|start_header_id|>'+message['role']+'<|end_header_id|>\\n\\n'+message['content']|trim+'<|eot_id|>'",
     "<|start_header_id|>role<|end_header_id|> turns of trimmed content closed by <|eot_id|>"},
    {"setsystem_message=messages[0]['content']|trim", "the system message trimmed into the first turn"},
    {"'Environment:ipython\\n'", "\"Environment: ipython\" when tools are given"},
    {"'CuttingKnowledgeDate:December2023\\n'", "\"Cutting Knowledge Date: December 2023\""},
    {"'TodayDate:'+date_string+'\\n\\n'", "\"Today Date: \" + date_string"},
    {"setdate_string='26Jul2024'", "date_string \"26 Jul 2024\" by default"},
    {"{{system_message}}{{'<|eot_id|>'}}", "the system message after the date"},
    {"settools_in_user_message=true", "tools in the first user message by default (tools_in_user_message)"},
    {"{{'<|start_header_id|>user<|end_header_id|>\\n\\n'}}{{'Giventhefollowingfunctions,pleaserespondwithaJSONfora"
     "functioncall'}}{{'withitsproperargumentsthatbestanswersthegivenprompt.\\n\\n'}}{{'Respondintheformat{'name':"
     "functionname,'parameters':dictionaryofargumentnameanditsvalue}.'}}{{'Donotusevariables.\\n\\n'}}{%fortintools%}"
     "{{t|tojson(indent=4)}}{{'\\n\\n'}}{%endfor%}{{first_user_message+'<|eot_id|>'}}",
     "the tools listed with tojson(indent=4) in the first user turn"},
    {"raise_exception('Cannotputtoolsinthefirstusermessagewhenthere'snofirstusermessage!')",
     "raise_exception for tools without a user message"},
    {"raise_exception('Thismodelonlysupportssingletool-callsatonce!')", "raise_exception for other than one tool call"},
    {"{{'<|start_header_id|>assistant<|end_header_id|>\\n\\n'}}{{'{'name':''+tool_call.name+'','}}{{''parameters':'}}"
     "{{tool_call.arguments|tojson}}{{'}'}}",
     "tool calls as {\"name\": ..., \"parameters\": ...}"},
    {"{{'<|start_header_id|>ipython<|end_header_id|>\\n\\n'}}{%ifmessage.contentismappingormessage.contentisiterable%}"
     "{{message.content|tojson}}",
     "tool responses as JSON in the ipython role"},
};

// What a Llama 3 template may do that topotrain does not render: refused by name.
const Feature kLlama3Refused[] = {
    {"strftime_now", "strftime_now (today's date as date_string, which would make the prepared data depend on the "
                     "day it is made; set date_string to a fixed date, as Llama 3.1's template does)"},
    {"<|image|>", "<|image|> (images)"},
};

template <size_t N>
std::string missing(const std::string& text, const Feature (&features)[N]) {
  std::string out;
  for (const Feature& f : features) {
    if (text.find(f.text) == std::string::npos) out += (out.empty() ? "" : ", ") + std::string(f.what);
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(cat("cannot read '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

ChatTemplate ChatTemplate::chatml() { return ChatTemplate(ChatTemplateFamily::chatml, ""); }

ChatTemplate ChatTemplate::recognise(const std::string& text, const std::string& source,
                                     const std::string& bos_token) {
  const std::string c = canonical(text);
  const std::string fix =
      "topotrain renders Qwen3's, Qwen2.5's and Llama 3.1's chat templates; give a tokenizer with one of those, or "
      "move the file away to use the fixed <|im_start|>{role}\\n{content}<|im_end|>\\n template";
  if (c.find("<|start_header_id|>") != std::string::npos) {
    for (const Feature& f : kLlama3Refused) {
      if (c.find(f.text) != std::string::npos) {
        throw ConfigError(
            cat("the chat_template in '", source, "' uses ", f.what, ", which topotrain does not render; ", fix));
      }
    }
    const std::string absent = missing(c, kLlama3Features);
    if (!absent.empty()) {
      throw ConfigError(cat("the chat_template in '", source,
                            "' has Llama 3 header turns but is not Llama 3.1's: it lacks ", absent, "; ", fix));
    }
    if (bos_token.empty()) {
      throw ConfigError(cat("the chat_template in '", source,
                            "' starts with bos_token, which the tokenizer_config.json beside it does not name; set "
                            "\"bos_token\" there (Llama 3's is <|begin_of_text|>)"));
    }
    return ChatTemplate(ChatTemplateFamily::llama3, source, bos_token);
  }
  if (c.find("reasoning_content") != std::string::npos || c.find("<think>") != std::string::npos) {
    const std::string absent = missing(c, kQwen3Features);
    if (!absent.empty()) {
      throw ConfigError(cat("the chat_template in '", source,
                            "' reasons (<think>/reasoning_content) but is not Qwen3's: it lacks ", absent, "; ", fix));
    }
    return ChatTemplate(ChatTemplateFamily::qwen3, source);
  }
  const std::string absent = missing(c, kQwen2_5Features);
  if (!absent.empty()) {
    throw ConfigError(cat("the chat_template in '", source, "' is not one topotrain recognises (neither Qwen3's, "
                          "which reasons, nor Qwen2.5's: it lacks ", absent, "); ", fix));
  }
  return ChatTemplate(ChatTemplateFamily::qwen2_5, source);
}

ChatTemplate ChatTemplate::beside_tokenizer(const std::string& tokenizer_spec) {
  if (tokenizer_spec == "byte") return chatml();
  const std::string directory = parent_directory(tokenizer_spec);
  const std::string config_path = join_path(directory, "tokenizer_config.json");
  nlohmann::json config = nlohmann::json::object();
  if (is_regular_file(config_path)) {
    config = nlohmann::json::parse(read_file(config_path), nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      throw ConfigError(cat("'", config_path, "' is not a JSON object"));
    }
  }
  // A string, or an AddedToken object {"content": ...}.
  const nlohmann::json bos = config.value("bos_token", nlohmann::json());
  const nlohmann::json bos_text = bos.is_object() ? bos.value("content", nlohmann::json()) : bos;
  const std::string bos_token = bos_text.is_string() ? bos_text.get<std::string>() : "";
  // Newer transformers save the template in a file of its own, which wins when present.
  const std::string jinja = join_path(directory, "chat_template.jinja");
  if (is_regular_file(jinja)) return recognise(read_file(jinja), jinja, bos_token);
  if (!config.contains("chat_template")) return chatml();
  if (!config["chat_template"].is_string()) {
    throw ConfigError(cat("'", config_path,
                          "': chat_template is not one string (named templates are not supported); keep the "
                          "\"default\" one as the chat_template string"));
  }
  return recognise(config["chat_template"].get<std::string>(), config_path, bos_token);
}

std::string ChatTemplate::description() const {
  switch (family_) {
    case ChatTemplateFamily::qwen3: return "Qwen3 (" + source_ + ")";
    case ChatTemplateFamily::qwen2_5: return "Qwen2.5 (" + source_ + ")";
    case ChatTemplateFamily::llama3: return "Llama 3.1 (" + source_ + ")";
    case ChatTemplateFamily::chatml: break;
  }
  return "fixed <|im_start|>{role}\\n{content}<|im_end|>\\n";
}

RenderedChat ChatTemplate::render(const ChatConversation& conversation, const std::string& origin) const {
  switch (family_) {
    case ChatTemplateFamily::qwen3: return detail::render_qwen3(conversation, origin);
    case ChatTemplateFamily::qwen2_5: return detail::render_qwen2_5(conversation, origin);
    case ChatTemplateFamily::llama3: return detail::render_llama3(conversation, origin, bos_token_);
    case ChatTemplateFamily::chatml: break;
  }
  return detail::render_chatml(conversation, origin);
}

}  // namespace topotrain::data
