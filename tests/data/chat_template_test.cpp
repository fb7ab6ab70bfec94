// Chat rendering and its loss mask. Qwen3: against Jinja2 rendering the real chat_template
// as transformers does (render_chat_template.py) over the conversations in
// chat_conversations.jsonl, tokenized with the real tokenizer.json; the mask is checked
// from the rendered text's own characters, decoding each id independently. Qwen2.5:
// against renderings written by hand from its documented format.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "test_dir.h"
#include "topotrain/core/error.h"
#include "topotrain/data/bpe_tokenizer.h"
#include "topotrain/data/byte_tokenizer.h"
#include "topotrain/data/chat_template.h"
#include "topotrain/data/document_encoder.h"
#include "topotrain/data/python_json.h"
#include "topotrain/data/unicode_normalizer.h"

namespace topotrain::data {
namespace {

using Ids = std::vector<uint32_t>;
using Json = nlohmann::ordered_json;

const std::string kQwen3Dir = std::string(TOPOTRAIN_SOURCE_DIR) + "/../shared/data/qwen3-tokenizer";
const std::string kConversations = std::string(TOPOTRAIN_SOURCE_DIR) + "/tests/data/chat_conversations.jsonl";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

ChatConversation conversation(const std::string& json) { return parse_chat_conversation(Json::parse(json), "test"); }

std::vector<std::string> conversation_lines() {
  std::vector<std::string> lines;
  std::istringstream in(read(kConversations));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

// The assistant ranges found in `text` itself: after each "<|im_start|>assistant\n" through
// the next "<|im_end|>" (a Qwen2.5 tool-call turn writes its newline with the first call).
std::vector<ByteRange> assistant_ranges(const std::string& text) {
  std::vector<ByteRange> ranges;
  const std::string open = "<|im_start|>assistant\n", close = "<|im_end|>";
  for (size_t at = text.find(open); at != std::string::npos; at = text.find(open, at)) {
    const size_t end = text.find(close, at);
    ranges.push_back({at + open.size(), end + close.size()});
    at = end;
  }
  return ranges;
}

std::vector<uint8_t> mask_of(const std::vector<ByteRange>& tokens, const std::vector<ByteRange>& ranges) {
  std::vector<uint8_t> mask;
  for (const ByteRange& t : tokens) {
    bool trained = false;
    for (const ByteRange& r : ranges) trained = trained || (t.begin < r.end && r.begin < t.end);
    mask.push_back(trained);
  }
  return mask;
}

// Each id's bytes, read from tokenizer.json without the tokenizer: the vocabulary's strings
// spelled back from the byte-level alphabet, added tokens as their content.
std::vector<std::string> id_bytes(const std::string& tokenizer_json) {
  std::map<std::string, unsigned char> byte_of;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    byte_of[s] = static_cast<unsigned char>(b);
  }
  const nlohmann::json j = nlohmann::json::parse(read(tokenizer_json));
  std::vector<std::string> bytes(200000);
  for (const auto& [token, id] : j["model"]["vocab"].items()) {
    std::string decoded;
    for (size_t i = 0; i < token.size();) {
      const size_t n = (static_cast<unsigned char>(token[i]) < 0x80) ? 1 : 2;
      decoded += static_cast<char>(byte_of.at(token.substr(i, n)));
      i += n;
    }
    bytes.at(id.get<size_t>()) = decoded;
  }
  for (const auto& added : j["added_tokens"]) bytes.at(added["id"].get<size_t>()) = added["content"].get<std::string>();
  return bytes;
}

TEST(ChatTemplate, FixedTemplateWithTheByteTokenizer) {
  const ByteTokenizer t;
  const ChatTemplate chatml = ChatTemplate::beside_tokenizer("byte");
  ASSERT_EQ(chatml.family(), ChatTemplateFamily::chatml);
  const RenderedChat chat = chatml.render(
      conversation(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"), "t");
  EXPECT_EQ(chat.text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n");
  EncodedDocument doc;
  encode_chat_document(t, chat, doc);
  const Ids expected = {257, 'u', 's', 'e', 'r', '\n', 'h', 'i', 258, '\n',
                        257, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', '\n', 'y', 'o', 258, '\n'};
  std::vector<uint8_t> mask(expected.size(), 0);
  mask[21] = mask[22] = mask[23] = 1;  // "yo" and the <|im_end|> after it
  EXPECT_EQ(doc.tokens, expected);
  EXPECT_EQ(doc.loss_mask, mask);

  for (const char* refused :
       {R"({"messages": [{"role": "assistant", "content": "a", "reasoning_content": "r"}]})",
        R"({"messages": [{"role": "user", "content": "u"}], "tools": [{"name": "f"}]})"}) {
    try {
      chatml.render(conversation(refused), "f.jsonl:3");
      FAIL() << refused;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("f.jsonl:3: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
    }
  }

  EncodedDocument text;
  encode_text_document(t, "ab", text);
  EXPECT_EQ(text.tokens, (Ids{'a', 'b', 256}));
  EXPECT_EQ(text.loss_mask, (std::vector<uint8_t>{1, 1, 1}));
}

TEST(ChatTemplate, MessagesWithUnknownFieldsOrBadTypesAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages": [{"role": "user", "content": "u", "weight": 1}]})", "messages[0] (role \"user\") has the field \"weight\""},
      {R"({"messages": [{"role": "user", "content": null}]})", "write \"\" for none"},
      {R"({"messages": [{"role": "user"}]})", "messages[0] needs a \"content\" string"},
      {R"({"messages": []})", "non-empty list"},
      {R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f"}}]}]})",
       "messages[0].tool_calls[0].function needs \"arguments\""},
      {R"({"messages": [{"role": "assistant", "content": "", "reasoning_content": 3}]})", "string or null"},
      {R"({"messages": [{"role": "user", "content": "u"}], "tools": {"a": 1}})", "\"tools\" must be a list"},
  };
  for (const auto& [line, message] : cases) {
    try {
      conversation(line);
      FAIL() << line;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("test: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// Expected strings are what Python's json.dumps(value, ensure_ascii=False) prints.
TEST(PythonJson, WritesAsJsonDumpsDoes) {
  EXPECT_EQ(python_json_dumps(Json::parse(R"({"b": 1, "a": [true, null, "x"], "c": {}})")),
            R"({"b": 1, "a": [true, null, "x"], "c": {}})");
  EXPECT_EQ(python_json_dumps(Json::parse(R"(["\u00e9\u4e2d\ud83d\ude00", "q\"b\\s/\n\t\r\b\f\u0001\u001f\u007f"])")),
            "[\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\", \"q\\\"b\\\\s/\\n\\t\\r\\b\\f\\u0001\\u001f\x7f\"]");
  EXPECT_EQ(python_json_dumps(Json::parse("[1E5, 0.5, 1e-05, 2.5e20, 1e16, 1e15, -0.0, 3.0, 123456789012, -7]")),
            "[100000.0, 0.5, 1e-05, 2.5e+20, 1e+16, 1000000000000000.0, -0.0, 3.0, 123456789012, -7]");
  EXPECT_EQ(python_json_dumps(Json::parse("[0.1, 0.0001, 0.00012345, 1.5e-300, 1.7976931348623157e308, 123.456, 0.0, 1e100]")),
            "[0.1, 0.0001, 0.00012345, 1.5e-300, 1.7976931348623157e+308, 123.456, 0.0, 1e+100]");
  EXPECT_EQ(python_json_dumps(Json::parse("[[], {\"k\": []}]")), "[[], {\"k\": []}]");
  // json.dumps(..., indent=4), as Llama 3.1's template lists its tools.
  EXPECT_EQ(python_json_dumps(Json::parse(R"({"a": [1, {"b": "é"}], "c": {}, "d": []})"), 4),
            "{\n    \"a\": [\n        1,\n        {\n            \"b\": \"\xc3\xa9\"\n        }\n    ],\n"
            "    \"c\": {},\n    \"d\": []\n}");
}

TEST(UnicodeNormalizer, AlignmentMapsEachByteToWhatItCameFrom) {
  const UnicodeNormalizer nfc({NormalForm::nfc});
  std::vector<std::pair<size_t, size_t>> source;
  // "e" + U+0301 composes to "é": both bytes of it come from the three of "e\u0301".
  const std::string text = "ae\xcc\x81\n\xcc\x81x";
  const std::string out = nfc.apply_aligned(text, source);
  EXPECT_EQ(out, nfc.apply(text));
  EXPECT_EQ(out, "a\xc3\xa9\n\xcc\x81x");
  const std::vector<std::pair<size_t, size_t>> expected = {{0, 1}, {1, 4}, {1, 4}, {4, 5}, {5, 7}, {5, 7}, {7, 8}};
  EXPECT_EQ(source, expected);  // the newline stays its own: nothing composes with it
}

TEST(BpeTokenizer, SpansCoverTheTextAndIdsMatchEncode) {
  const std::string path = kQwen3Dir + "/tokenizer.json";
  if (!std::ifstream(path)) GTEST_SKIP() << "no Qwen3 tokenizer.json at " << path;
  const auto t = BpeTokenizer::load(path, "");
  const UnicodeNormalizer nfd({NormalForm::nfd});
  for (const std::string& text : {std::string("Hello <|im_end|>\n\n  world \xf0\x9f\x91\x8d<think>x"),
                                 nfd.apply("Cr\xc3\xa8me br\xc3\xbbl\xc3\xa9" "e<|im_start|>\xed\x95\x9c\xea\xb5\xad")}) {
    Ids ids, reference;
    std::vector<ByteRange> spans;
    t->encode_with_spans(text, ids, spans);
    t->encode(text, reference);
    EXPECT_EQ(ids, reference);
    ASSERT_EQ(spans.size(), ids.size());
    size_t at = 0;  // spans tile the text, at most widened over a stretch the normalizer rewrote
    for (const ByteRange& s : spans) {
      EXPECT_LE(s.begin, at);
      EXPECT_GE(s.end, at);
      EXPECT_LT(s.begin, s.end);
      at = std::max(at, s.end);
    }
    EXPECT_EQ(at, text.size());
  }
}

TEST(ChatTemplate, TemplatesAreRecognisedByTheirFeaturesOrRefused) {
  const std::string config = kQwen3Dir + "/tokenizer_config.json";
  if (std::ifstream(config)) {
    const std::string real = nlohmann::json::parse(read(config))["chat_template"].get<std::string>();
    EXPECT_EQ(ChatTemplate::beside_tokenizer(kQwen3Dir + "/tokenizer.json").family(), ChatTemplateFamily::qwen3);
    // Another spelling of the same template: no trim markers, double quotes, other indentation.
    std::string respelled;
    for (char c : real) {
      if (c == '\'') respelled += '"';
      else if (c == '\n') respelled += "\n  ";
      else respelled += c;
    }
    for (const char* marker : {"{%- ", "{{- "}) {
      for (size_t at = respelled.find(marker); at != std::string::npos; at = respelled.find(marker)) {
        respelled.replace(at, 4, std::string(marker, 2) + " ");
      }
    }
    EXPECT_EQ(ChatTemplate::recognise(respelled, "respelled").family(), ChatTemplateFamily::qwen3);
    // A reasoning template without Qwen3's empty think block on the last turn is not Qwen3's.
    std::string other = real;
    other.replace(other.find("loop.last or"), 12, "false or");
    try {
      ChatTemplate::recognise(other, "dir/tokenizer_config.json");
      FAIL();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'dir/tokenizer_config.json' reasons"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("a think block on the last turn"), std::string::npos) << e.what();
    }
  }
  try {
    ChatTemplate::recognise("{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}", "llama/tokenizer_config.json");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'llama/tokenizer_config.json' is not one topotrain recognises"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("move the file away"), std::string::npos) << e.what();
  }
  // Llama 3.0's template: header turns, but no dated system turn nor tools (3.1's features).
  const char* llama30 =
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
      "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
      "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
  try {
    ChatTemplate::recognise(llama30, "l3/tokenizer_config.json", "<|begin_of_text|>");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("has Llama 3 header turns but is not Llama 3.1's"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("\"Cutting Knowledge Date: December 2023\""), std::string::npos) << e.what();
  }
  try {
    ChatTemplate::recognise(std::string(llama30) + "{{ strftime_now('%d %b %Y') }}", "l32", "<|begin_of_text|>");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("uses strftime_now (today's date"), std::string::npos) << e.what();
  }
}

// The real Qwen3 chat_template, rendered by Jinja2 as transformers does, is the reference.
TEST(ChatTemplate, Qwen3RendersAsJinja2AndMasksTheAssistantsBytes) {
  const std::string tokenizer_json = kQwen3Dir + "/tokenizer.json", config = kQwen3Dir + "/tokenizer_config.json";
  if (!std::ifstream(tokenizer_json) || !std::ifstream(config)) GTEST_SKIP() << "no Qwen3 tokenizer at " << kQwen3Dir;
  const std::string rendered_path = test_file("qwen3_rendered.json");
  const std::string command = "/usr/bin/python3 " + std::string(TOPOTRAIN_SOURCE_DIR) +
                              "/tests/data/render_chat_template.py " + config + " " + kConversations + " > " + rendered_path;
  const int status = std::system(command.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "python3-jinja2 is not installed";
  ASSERT_EQ(status, 0) << command;
  const std::vector<std::string> reference = nlohmann::json::parse(read(rendered_path)).get<std::vector<std::string>>();
  const std::vector<std::string> lines = conversation_lines();
  ASSERT_EQ(reference.size(), lines.size());

  const auto t = BpeTokenizer::load(tokenizer_json, "");
  const ChatTemplate qwen3 = ChatTemplate::beside_tokenizer(tokenizer_json);
  const std::vector<std::string> bytes = id_bytes(tokenizer_json);
  const UnicodeNormalizer nfc({NormalForm::nfc});
  uint64_t trained = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE(lines[i]);
    const RenderedChat chat = qwen3.render(conversation(lines[i]), "test");
    ASSERT_EQ(chat.text, reference[i]);
    EXPECT_EQ(chat.assistant, assistant_ranges(reference[i]));

    EncodedDocument doc;
    encode_chat_document(*t, chat, doc);
    Ids ids;
    t->encode(reference[i], ids);
    EXPECT_EQ(doc.tokens, ids);

    // Decoded one by one, the ids spell the (NFC) text; the assistant's ranges in that
    // spelling say which tokens are trained.
    std::string spelled;
    std::vector<ByteRange> token_bytes;
    for (uint32_t id : doc.tokens) {
      token_bytes.push_back({spelled.size(), spelled.size() + bytes.at(id).size()});
      spelled += bytes.at(id);
    }
    ASSERT_EQ(spelled, nfc.apply(reference[i]));
    EXPECT_EQ(doc.loss_mask, mask_of(token_bytes, assistant_ranges(spelled)));
    for (uint8_t m : doc.loss_mask) trained += m;
  }
  EXPECT_GT(trained, 100u);
}

// A Qwen2.5-style template of our own wording: the features Qwen2.5's has.
const char* kQwen25StyleTemplate = R"({%- set default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant." %}
{%- if messages[0].role == "system" %}{% set system = messages[0].content %}{% else %}{% set system = default_system %}{% endif %}
{%- if tools %}
{{- "<|im_start|>system\n" + system + "\n\n# Tools ... <tools>" }}{% for t in tools %}{{ "\n" + (t | tojson) }}{% endfor %}
{%- else %}{{- "<|im_start|>system\n" + system + "<|im_end|>\n" }}{% endif %}
{%- for m in messages %}
  {%- if m.role == "assistant" and m.tool_calls %}
    {{- "<|im_start|>assistant" }}{% if m.content %}{{ "\n" + m.content }}{% endif %}
    {%- for call in m.tool_calls %}{{ "\n<tool_call>\n" + call.function.name + (call.function.arguments | tojson) + "\n</tool_call>" }}{% endfor %}
    {{- "<|im_end|>\n" }}
  {%- elif m.role == "tool" %}{{ "<|im_start|>user\n<tool_response>\n" + m.content + "\n</tool_response><|im_end|>\n" }}
  {%- elif not (loop.first and m.role == "system") %}{{ "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n" }}
  {%- endif %}
{%- endfor %})";

TEST(ChatTemplate, Qwen25RendersItsDocumentedFormat) {
  const std::string dir = test_file("qwen25");
  make_directories(dir);
  write(join_path(dir, "tokenizer_config.json"), nlohmann::json({{"chat_template", kQwen25StyleTemplate}}).dump());
  const ChatTemplate qwen25 = ChatTemplate::beside_tokenizer(join_path(dir, "tokenizer.json"));
  ASSERT_EQ(qwen25.family(), ChatTemplateFamily::qwen2_5);
  EXPECT_NE(qwen25.description().find("Qwen2.5 ("), std::string::npos);
  // chat_template.jinja, where newer transformers save the template, wins over the config.
  write(join_path(dir, "chat_template.jinja"), "{{ messages }}");
  EXPECT_THROW(ChatTemplate::beside_tokenizer(join_path(dir, "tokenizer.json")), ConfigError);
  remove_file(join_path(dir, "chat_template.jinja"));
  const std::string named = test_file("named");
  make_directories(named);
  write(join_path(named, "tokenizer_config.json"), R"({"chat_template": [{"name": "default", "template": "x"}]})");
  try {
    ChatTemplate::beside_tokenizer(join_path(named, "tokenizer.json"));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("named templates are not supported"), std::string::npos) << e.what();
  }
  write(join_path(named, "tokenizer_config.json"), R"({"model_max_length": 8})");
  EXPECT_EQ(ChatTemplate::beside_tokenizer(join_path(named, "tokenizer.json")).family(), ChatTemplateFamily::chatml);

  const std::string default_system =
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n";
  RenderedChat chat = qwen25.render(conversation(R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "<think>kept as text</think>\n\nHello"}]})"), "t");
  EXPECT_EQ(chat.text, default_system + "<|im_start|>user\nHi<|im_end|>\n"
                                         "<|im_start|>assistant\n<think>kept as text</think>\n\nHello<|im_end|>\n");
  EXPECT_EQ(chat.assistant, assistant_ranges(chat.text));

  chat = qwen25.render(conversation(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Sum?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": [2.5]}}},
                                                          {"name": "echo", "arguments": "{\"s\": 1}"}]},
      {"role": "tool", "content": "3.5"}, {"role": "tool", "content": "{\"s\": 1}"},
      {"role": "assistant", "content": "3.5"}],
      "tools": [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]})"), "t");
  EXPECT_EQ(chat.text,
            "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
            "{\"type\": \"function\", \"function\": {\"name\": \"add\", \"parameters\": {\"type\": \"object\"}}}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
            "XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nSum?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": [2.5]}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"echo\", \"arguments\": \"{\\\"s\\\": 1}\"}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n3.5\n</tool_response>\n<tool_response>\n{\"s\": 1}\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n3.5<|im_end|>\n");
  EXPECT_EQ(chat.assistant, assistant_ranges(chat.text));

  chat = qwen25.render(conversation(R"({"messages": [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "Checking.", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}],
      "tools": [{"name": "f"}]})"), "t");
  EXPECT_EQ(chat.text.rfind("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools", 0),
            0u) << chat.text;
  EXPECT_NE(chat.text.find("<|im_start|>assistant\nChecking.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|im_end|>\n"),
            std::string::npos) << chat.text;

  for (const auto& [line, message] : std::vector<std::pair<std::string, std::string>>{
           {R"({"messages": [{"role": "assistant", "content": "a", "reasoning_content": "r"}]})",
            "\"reasoning_content\" is not rendered by the Qwen2.5 chat template"},
           {R"({"messages": [{"role": "developer", "content": "d"}]})", "role \"developer\" is not rendered"},
           {R"({"messages": [{"role": "user", "content": "u", "tool_calls": [{"name": "f", "arguments": {}}]}]})",
            "\"tool_calls\" on a user message"}}) {
    try {
      qwen25.render(conversation(line), "data.jsonl:7");
      FAIL() << line;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("data.jsonl:7: messages[0]: " + message), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace topotrain::data
