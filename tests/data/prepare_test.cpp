// topotrain-prepare's pipeline on small files: documents, masks and order, independent of
// the number of threads; errors name the file and line.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

#include "test_dir.h"
#include "topotrain/core/error.h"
#include "topotrain/data/bpe_tokenizer.h"
#include "topotrain/data/prepare.h"

namespace topotrain::data {
namespace {

std::string write_input(const std::string& name, const std::string& text) {
  const std::string path = test_file(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::vector<uint32_t> bytes_then_eos(const std::string& text) {
  std::vector<uint32_t> ids(text.begin(), text.end());
  ids.push_back(256);
  return ids;
}

TEST(Prepare, ParagraphsAndJsonlInInputOrderWhateverTheThreads) {
  const std::string text = write_input("a.txt", "first para\nline two\n\n  \nsecond\n\n\nthird");
  const std::string jsonl = write_input(
      "b.jsonl", "{\"text\": \"t\"}\n\n{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}\n");
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    PrepareConfig config;
    config.inputs = {text, jsonl};
    config.output = write_input("out.h5", "");
    config.split = TextSplit::paragraph;
    config.threads = threads;
    config.batch_bytes = 8;  // many small work items: order must still hold
    const PrepareTotals totals = prepare_dataset(config);
    const TokenDataset d = TokenDataset::load(config.output);
    ASSERT_EQ(d.num_samples(), 5u);
    const std::vector<std::vector<uint32_t>> expected = {
        bytes_then_eos("first para\nline two"), bytes_then_eos("second"), bytes_then_eos("third"),
        bytes_then_eos("t"), {257, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', '\n', 'x', 258, '\n'}};
    for (uint64_t i = 0; i < 5; ++i) {
      const SampleView s = d.sample(i);
      EXPECT_EQ(std::vector<uint32_t>(s.tokens, s.tokens + s.length), expected[i]) << "document " << i;
    }
    ASSERT_TRUE(d.has_loss_mask());
    const SampleView chat = d.sample(4);
    EXPECT_EQ(std::vector<uint8_t>(chat.loss_mask, chat.loss_mask + chat.length),
              (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0}));
    EXPECT_EQ(d.sample(0).loss_mask[0], 1);
    EXPECT_EQ(totals.documents, 5u);
    EXPECT_EQ(totals.tokens, d.num_tokens());
    EXPECT_EQ(totals.loss_tokens, d.num_tokens() - 12);
    EXPECT_EQ(d.tokenizer(), "byte");
  }
}

TEST(Prepare, WholeFileIsOneDocumentByDefault) {
  PrepareConfig config;
  config.inputs = {write_input("c.txt", "a\n\nb\n")};
  config.output = write_input("out2.h5", "");
  prepare_dataset(config);
  const TokenDataset d = TokenDataset::load(config.output);
  ASSERT_EQ(d.num_samples(), 1u);
  EXPECT_EQ(d.sample_length(0), 6u);
  EXPECT_FALSE(d.has_loss_mask());
}

TEST(Prepare, BadJsonlLineIsNamedByFileAndLine) {
  PrepareConfig config;
  const std::string input = write_input("bad.jsonl", "{\"text\": \"ok\"}\n{\"txt\": 1}\n");
  config.inputs = {input};
  config.output = write_input("out3.h5", "");
  try {
    prepare_dataset(config);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(input + ":2: a JSONL line needs a \"text\""), std::string::npos) << e.what();
  }
  config.inputs = {write_input("missing_dir/none.txt", "")};
  EXPECT_THROW(prepare_dataset(config), ConfigError);
}

// What prepare_dataset's ConfigError says; "" when it does not throw.
std::string refusal(const PrepareConfig& config) {
  try {
    prepare_dataset(config);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The parse error is nlohmann-json's, with the column of the line where it stopped.
TEST(Prepare, MalformedJsonlLineSaysWhatAndWhere) {
  PrepareConfig config;
  config.output = test_file("never.h5");
  const std::string ok = "{\"text\": \"ok\"}\n";
  config.inputs = {write_input("unterminated.jsonl", ok + ok + "{\"text\": \"abc\n")};
  EXPECT_NE(refusal(config).find(config.inputs[0] + ":3: invalid JSON at column 14: syntax error while parsing "
                                 "value - invalid string: missing closing quote"),
            std::string::npos)
      << refusal(config);
  config.inputs = {write_input("surrogate.jsonl", "{\"text\": \"\\ud800\"}\n")};
  EXPECT_NE(refusal(config).find(config.inputs[0] + ":1: invalid JSON at column 17: syntax error while parsing "
                                 "value - invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"),
            std::string::npos)
      << refusal(config);
  config.inputs = {write_input("list.jsonl", "[1, 2]\n")};
  EXPECT_NE(refusal(config).find(config.inputs[0] + ":1: a JSONL line must be a JSON object"), std::string::npos)
      << refusal(config);
  EXPECT_NE(refusal(config).find("not array"), std::string::npos) << refusal(config);
  EXPECT_FALSE(file_exists(config.output));
}

// A conversation trains only what its assistant messages say: without one (here a role the
// fixed template renders but does not train) the file would train nothing, and is not written.
TEST(Prepare, OutputWithNothingToTrainOnIsRefused) {
  PrepareConfig config;
  config.output = test_file("untrained.h5");
  config.inputs = {write_input("wizard.jsonl", "{\"messages\": [{\"role\": \"wizard\", \"content\": \"hi\"}]}\n")};
  const std::string message = refusal(config);
  // <|im_start|> "wizard\nhi" <|im_end|> "\n": 1 + 9 + 1 + 1 byte-tokenizer tokens, all mask 0.
  EXPECT_NE(message.find("nothing written to '" + config.output + "': it would have no token with loss_mask 1 that "
                         "follows another token of its document: nothing to train on (loss_mask is 0 at all 12 "
                         "tokens)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("none of the 1 conversations has one"), std::string::npos) << message;
  EXPECT_FALSE(file_exists(config.output));
  EXPECT_FALSE(file_exists(config.output + ".tmp"));
  // One assistant message anywhere is enough.
  config.inputs.push_back(
      write_input("assistant.jsonl", "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}\n"));
  EXPECT_EQ(prepare_dataset(config).loss_targets, 2u);  // "x" and <|im_end|>
}

// The byte tokenizer's eos is fixed: another --eos is refused rather than ignored.
TEST(Prepare, ByteTokenizerTakesNoOtherEos) {
  PrepareConfig config;
  config.output = test_file("eos.h5");
  config.inputs = {write_input("eos.txt", "text")};
  config.eos = "<|nonexistent|>";
  EXPECT_NE(refusal(config).find("--eos '<|nonexistent|>': the byte tokenizer ends documents with <|endoftext|> "
                                 "(id 256) and no other token"),
            std::string::npos)
      << refusal(config);
  config.eos = "<|im_end|>";
  EXPECT_NE(refusal(config).find("--eos '<|im_end|>'"), std::string::npos);
  config.eos = "<|endoftext|>";
  EXPECT_EQ(prepare_dataset(config).tokens, 5u);
  EXPECT_FALSE(TokenDataset::load(config.output).has_loss_mask());
}

// With a tokenizer.json, chat lines are rendered with the chat_template of the
// tokenizer_config.json beside it; a template topotrain does not render refuses chat data
// (naming the file) but not plain text.
TEST(Prepare, ChatIsRenderedWithTheTemplateBesideTheTokenizer) {
  const std::string qwen3 = std::string(TOPOTRAIN_SOURCE_DIR) + "/../shared/data/qwen3-tokenizer/tokenizer.json";
  if (!std::ifstream(qwen3)) GTEST_SKIP() << "no Qwen3 tokenizer.json at " << qwen3;
  PrepareConfig config;
  config.tokenizer = qwen3;
  config.inputs = {write_input("chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                                             "{\"role\": \"assistant\", \"content\": \"\\n\\nyo\"}]}\n")};
  config.output = write_input("chat.h5", "");
  const PrepareTotals totals = prepare_dataset(config);
  EXPECT_EQ(totals.chat_documents, 1u);
  EXPECT_NE(totals.chat_template.find("Qwen3 ("), std::string::npos) << totals.chat_template;
  const auto t = BpeTokenizer::load(qwen3, "");
  const std::string rendered = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nyo<|im_end|>\n";
  std::vector<uint32_t> ids;
  t->encode(rendered, ids);
  const TokenDataset d = TokenDataset::load(config.output);
  const SampleView s = d.sample(0);
  EXPECT_EQ(std::vector<uint32_t>(s.tokens, s.tokens + s.length), ids);
  // Trained: from <think> through <|im_end|>; not the final newline nor anything before.
  const size_t think = std::find(ids.begin(), ids.end(), *t->special_token("<think>")) - ids.begin();
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(s.loss_mask[i], i >= think && i + 1 < ids.size()) << i;

  const std::string elsewhere = test_file("other_model");
  make_directories(elsewhere);
  ASSERT_EQ(symlink(qwen3.c_str(), join_path(elsewhere, "tokenizer.json").c_str()), 0);
  const std::string other_config = join_path(elsewhere, "tokenizer_config.json");
  std::ofstream(other_config) << R"({"chat_template": "{% for m in messages %}[INST] {{ m.content }}{% endfor %}"})";
  config.tokenizer = join_path(elsewhere, "tokenizer.json");
  try {
    prepare_dataset(config);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(config.inputs[0] + ":1: chat data, but the chat_template in '" + other_config),
              std::string::npos) << e.what();
  }
  config.inputs = {write_input("text.jsonl", "{\"text\": \"plain\"}\n")};
  EXPECT_EQ(prepare_dataset(config).documents, 1u);
}

}  // namespace
}  // namespace topotrain::data
