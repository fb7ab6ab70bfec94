// topotrain-prepare's SFT record formats (jsonl_record.h): a ShareGPT, prompt/completion or
// Alpaca line gives the tokens and loss mask of the "messages" line it maps to (the messages
// path being the reference), checked once by hand with the byte tokenizer and, when the real
// Qwen3 tokenizer is at hand, with its chat template; bad records are refused naming the
// file, line and field.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "test_dir.h"
#include "topotrain/core/error.h"
#include "topotrain/data/bpe_tokenizer.h"
#include "topotrain/data/prepare.h"

namespace topotrain::data {
namespace {

const std::string kQwen3 = std::string(TOPOTRAIN_SOURCE_DIR) + "/../shared/data/qwen3-tokenizer/tokenizer.json";

struct Prepared {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> loss_mask;
};

bool operator==(const Prepared& a, const Prepared& b) { return a.tokens == b.tokens && a.loss_mask == b.loss_mask; }

std::ostream& operator<<(std::ostream& out, const Prepared& p) {
  out << "tokens";
  for (uint32_t t : p.tokens) out << ' ' << t;
  out << " | mask ";
  for (uint8_t m : p.loss_mask) out << int(m);
  return out;
}

// Prepares JSONL lines into a file of their own (one tokenizer load) and reads back each
// line's document.
std::vector<Prepared> prepare_lines(const std::vector<std::string>& lines, const std::string& tokenizer = "byte") {
  static int count = 0;
  const std::string name = "lines" + std::to_string(count++);
  PrepareConfig config;
  config.inputs = {test_file(name + ".jsonl")};
  std::ofstream input(config.inputs[0], std::ios::binary);
  for (const std::string& line : lines) input << line << "\n";
  input.close();
  config.output = test_file(name + ".h5");
  config.tokenizer = tokenizer;
  prepare_dataset(config);
  const TokenDataset d = TokenDataset::load(config.output);
  EXPECT_EQ(d.num_samples(), lines.size());
  std::vector<Prepared> out;
  for (uint64_t i = 0; i < d.num_samples(); ++i) {
    const SampleView s = d.sample(i);
    out.push_back({std::vector<uint32_t>(s.tokens, s.tokens + s.length), {}});
    if (d.has_loss_mask()) out.back().loss_mask.assign(s.loss_mask, s.loss_mask + s.length);
  }
  return out;
}

Prepared prepare_line(const std::string& line, const std::string& tokenizer = "byte") {
  const std::vector<Prepared> out = prepare_lines({line}, tokenizer);
  return out.empty() ? Prepared{} : out[0];
}

// What prepare_dataset refuses the lines with ("" when it does not), and the input's path.
std::pair<std::string, std::string> refusal(const std::string& lines) {
  static int count = 0;
  PrepareConfig config;
  config.inputs = {test_file("bad" + std::to_string(count++) + ".jsonl")};
  std::ofstream(config.inputs[0], std::ios::binary) << lines;
  config.output = test_file("bad.h5");
  try {
    prepare_dataset(config);
  } catch (const ConfigError& e) {
    EXPECT_FALSE(file_exists(config.output));
    return {e.what(), config.inputs[0]};
  }
  return {"", config.inputs[0]};
}

#define EXPECT_REFUSED(lines, expected)                                                  \
  do {                                                                                   \
    const auto [message, path] = refusal(lines);                                         \
    EXPECT_NE(message.find(path + (expected)), std::string::npos) << "got: " << message; \
  } while (0)

// Each format's line and the messages line it stands for.
const std::pair<std::string, std::string> kEquivalents[] = {
    {R"({"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},
        {"from": "gpt", "value": "Hello."}, {"from": "user", "value": "Bye"},
        {"from": "assistant", "value": "Bye."}]})",
     R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Bye."}]})"},
    {R"({"prompt": "2+2?", "completion": "4", "id": "x1"})",
     R"({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]})"},
    {R"({"instruction": "Add.", "input": "2 and 2", "output": "4"})",
     R"({"messages": [{"role": "user", "content": "Add.\n\n2 and 2"}, {"role": "assistant", "content": "4"}]})"},
    {R"({"instruction": "Say hi.", "input": "", "output": "hi"})",
     R"({"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}]})"},
    {R"({"instruction": "Say hi.", "output": "hi", "system": "Be kind."})",
     R"({"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "hi"}]})"},
    {R"({"instruction": "", "input": "Say hi.", "output": "hi"})",
     R"({"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}]})"},
    // Per-turn weights as some ShareGPT sets carry them, saying what topotrain does anyway.
    {R"({"conversations": [{"from": "human", "value": "a", "weight": 0}, {"from": "gpt", "value": "b", "weight": 1},
        {"from": "human", "value": "c", "weight": null}, {"from": "gpt", "value": "d", "weight": null}]})",
     R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]})"},
};

std::string one_line(std::string json) {
  for (char& c : json) {
    if (c == '\n') c = ' ';
  }
  return json;
}

// Both sides prepared in one file each, with one tokenizer load.
void expect_each_format_is_its_messages_record(const std::string& tokenizer) {
  std::vector<std::string> formats, messages;
  for (const auto& [format, reference] : kEquivalents) {
    formats.push_back(one_line(format));
    messages.push_back(one_line(reference));
  }
  const std::vector<Prepared> got = prepare_lines(formats, tokenizer), expected = prepare_lines(messages, tokenizer);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << formats[i];
}

TEST(SftFormats, EachFormatIsItsMessagesRecordWithTheByteTokenizer) {
  expect_each_format_is_its_messages_record("byte");
}

TEST(SftFormats, EachFormatIsItsMessagesRecordWithTheQwen3Template) {
  if (!std::ifstream(kQwen3)) GTEST_SKIP() << "no Qwen3 tokenizer.json at " << kQwen3;
  expect_each_format_is_its_messages_record(kQwen3);
  // By hand: Qwen3's rendering of a ShareGPT pair, trained from <think> through <|im_end|>.
  const Prepared got =
      prepare_line(R"({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]})", kQwen3);
  const auto qwen3 = BpeTokenizer::load(kQwen3, "");
  std::vector<uint32_t> ids;
  qwen3->encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nyo<|im_end|>\n", ids);
  EXPECT_EQ(got.tokens, ids);
  const size_t think = std::find(ids.begin(), ids.end(), *qwen3->special_token("<think>")) - ids.begin();
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(got.loss_mask[i], i >= think && i + 1 < ids.size()) << i;
}

std::vector<uint32_t> bytes(const std::string& text) { return std::vector<uint32_t>(text.begin(), text.end()); }

// The fixed template, by hand: <|im_start|> = 257, <|im_end|> = 258; trained from right after
// "<|im_start|>assistant\n" through <|im_end|>.
TEST(SftFormats, AlpacaByHandWithTheByteTokenizer) {
  const Prepared got = prepare_line(R"({"instruction": "A", "input": "B", "output": "C"})");
  std::vector<uint32_t> tokens = {257};
  for (const std::vector<uint32_t>& part : {bytes("user\nA\n\nB"), std::vector<uint32_t>{258}, bytes("\n"),
                                            std::vector<uint32_t>{257}, bytes("assistant\nC"),
                                            std::vector<uint32_t>{258}, bytes("\n")}) {
    tokens.insert(tokens.end(), part.begin(), part.end());
  }
  std::vector<uint8_t> mask(tokens.size(), 0);
  mask[mask.size() - 3] = 1;  // "C"
  mask[mask.size() - 2] = 1;  // <|im_end|>
  EXPECT_EQ(got, (Prepared{tokens, mask}));
}

// ultrachat_200k's lines have "prompt" (without "completion") beside "messages": one format's
// keys are complete, the other's half are ignored like any other key.
TEST(SftFormats, HalfAFormatBesideAWholeOneIsIgnored) {
  const std::string messages =
      R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]})";
  const std::string ultrachat = R"({"prompt": "x", "prompt_id": "9", "messages": [{"role": "user", "content": "x"},)"
                                R"( {"role": "assistant", "content": "y"}]})";
  EXPECT_EQ(prepare_line(ultrachat), prepare_line(messages));
  // A null counts as absent: how pandas writes a column a row lacks.
  EXPECT_EQ(prepare_line(R"({"text": null, "prompt": "x", "completion": "y"})"), prepare_line(messages));
}

TEST(SftFormats, BadRecordsAreRefusedNamingFileLineAndField) {
  const std::string ok = "{\"text\": \"fine\"}\n";
  // Missing fields.
  EXPECT_REFUSED(ok + R"({"prompt": "a"})",
                 ":2: \"prompt\" without \"completion\": prompt/completion records need both \"prompt\" and "
                 "\"completion\"");
  EXPECT_REFUSED(R"({"output": "a", "input": "b"})",
                 ":1: \"output\" without \"instruction\": Alpaca records need both \"instruction\" and \"output\"");
  EXPECT_REFUSED(R"({"conversations": [{"from": "human"}]})", ":1: conversations[0] needs \"value\"");
  EXPECT_REFUSED(R"({"conversations": [{"value": "hi"}]})", ":1: conversations[0] needs \"from\"");
  EXPECT_REFUSED(R"({"conversations": []})", ":1: \"conversations\" must be a non-empty list of {\"from\"");
  EXPECT_REFUSED(R"({"id": 3, "source": "x"})",
                 ":1: a JSONL line needs a \"text\" string, a \"messages\" list, a \"conversations\" list (ShareGPT), "
                 "\"prompt\" and \"completion\", or \"instruction\" and \"output\" (Alpaca); this one has the keys "
                 "\"id\", \"source\"");
  // Unknown role.
  EXPECT_REFUSED(ok + ok + R"({"conversations": [{"from": "human", "value": "a"}, {"from": "bot", "value": "b"}]})",
                 ":3: conversations[1]: \"from\" is \"bot\", which is not a ShareGPT role topotrain reads; use human "
                 "or user (-> user), gpt or assistant (-> assistant), or system");
  // Empty responses.
  EXPECT_REFUSED(R"({"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": ""}]})",
                 ":1: conversations[1]: \"value\" of a \"gpt\" turn is empty");
  EXPECT_REFUSED(R"({"prompt": "a", "completion": ""})", ":1: \"completion\" is empty");
  EXPECT_REFUSED(R"({"instruction": "a", "input": "b", "output": ""})", ":1: \"output\" is empty");
  // Wrong types.
  EXPECT_REFUSED(R"({"prompt": "a", "completion": 4})",
                 ":1: \"completion\" must be a string (prompt/completion record), not number");
  EXPECT_REFUSED(R"({"instruction": ["a"], "output": "b"})",
                 ":1: \"instruction\" must be a string (Alpaca record), not array");
  EXPECT_REFUSED(R"({"instruction": "a", "input": 1, "output": "b"})", ":1: \"input\" must be a string");
  EXPECT_REFUSED(R"({"conversations": [{"from": "human", "value": null}]})",
                 ":1: conversations[0]: \"value\" must be a string (ShareGPT record), not null; write \"\" for none");
  EXPECT_REFUSED(R"({"conversations": {"from": "human", "value": "a"}})",
                 ":1: \"conversations\" must be a non-empty list of {\"from\": ..., \"value\": ...} (ShareGPT "
                 "record), not object");
  EXPECT_REFUSED(R"({"conversations": ["hi"]})", ":1: conversations[0] must be an object");
  EXPECT_REFUSED(R"({"prompt": [{"role": "user", "content": "a"}], "completion": "b"})",
                 ":1: \"prompt\" is a list of messages; topotrain reads prompt/completion as strings");
  EXPECT_REFUSED(R"({"text": 5})", ":1: \"text\" must be a string (text record), not number");
  EXPECT_REFUSED(R"({"prompt": "a", "completion": "b", "system": 1})",
                 ":1: \"system\" must be a string (prompt/completion record), not number");
  // Fields that would be dropped or change what is trained.
  EXPECT_REFUSED(R"({"conversations": [{"from": "human", "value": "a", "lang": "en"}]})",
                 ":1: conversations[0] has the field \"lang\", which is not read");
  EXPECT_REFUSED(R"({"conversations": [{"from": "human", "value": "a", "weight": 1}]})",
                 ":1: conversations[0] has \"weight\": 1, but topotrain trains every gpt/assistant turn");
  EXPECT_REFUSED(R"({"conversations": [{"from": "gpt", "value": "a", "weight": 0}]})",
                 ":1: conversations[0] has \"weight\": 0");
  EXPECT_REFUSED(R"({"system": "s", "conversations": [{"from": "system", "value": "t"}]})",
                 ":1: conversations[0] is a system turn, and the line has a top-level \"system\" too");
  EXPECT_REFUSED(R"({"prompt": "a", "completion": "b", "tools": []})",
                 ":1: \"tools\" is read with \"messages\" records only, not with prompt/completion records");
}

TEST(SftFormats, ALineOfTwoFormatsIsRefusedNamingBoth) {
  EXPECT_REFUSED(R"({"text": "a", "messages": [{"role": "assistant", "content": "b"}]})",
                 ":1: the line has the keys of two record formats, \"text\" (text) and \"messages\" (messages); "
                 "keep one format per line");
  EXPECT_REFUSED(R"({"prompt": "a", "completion": "b", "instruction": "c", "output": "d"})",
                 ":1: the line has the keys of two record formats, \"prompt\" and \"completion\" (prompt/completion) "
                 "and \"instruction\" and \"output\" (Alpaca)");
  EXPECT_REFUSED(R"({"conversations": [{"from": "gpt", "value": "b"}], "messages": []})",
                 ":1: the line has the keys of two record formats, \"messages\" (messages) and \"conversations\" "
                 "(ShareGPT)");
}

}  // namespace
}  // namespace topotrain::data
