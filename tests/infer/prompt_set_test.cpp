// Prompts from a prepared dataset (one per assistant turn: the tokens before each run of
// loss_mask 1) and from JSONL, and every refusal naming the file and the fix.
#include <gtest/gtest.h>

#include <fstream>

#include "../config_error_text.h"
#include "topotrain/core/files.h"
#include "topotrain/data/token_dataset.h"
#include "topotrain/infer/prompt_set.h"

namespace inf = topotrain::infer;
using topotrain::test_support::config_error_of;

namespace {

class PromptSetTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = topotrain::make_temp_directory("topotrain_prompt_set_"); }
  void TearDown() override { topotrain::remove_tree(dir_); }
  std::string path(const std::string& name) const { return topotrain::join_path(dir_, name); }
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  std::string dir_;
};

}  // namespace

TEST_F(PromptSetTest, ADatasetGivesThePrefixBeforeEveryAssistantTurn) {
  topotrain::data::TokenDatasetContents c;
  // Document 0: turns start at rows 2 and 6; document 1: mask 1 from row 0 (no prompt), then
  // at row 4; document 2: one turn at row 1.
  c.tokens = {10, 11, 12, 13, 14, 15, 16, 17, 20, 21, 22, 23, 24, 30, 31, 32};
  c.loss_mask = {0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1};
  c.offsets = {0, 8, 13, 16};
  c.vocab_size = 64, c.eos_id = 3, c.tokenizer = "test";
  const auto chat = path("chat.h5");
  topotrain::data::write_token_dataset(chat, c);

  const auto all = inf::read_prompts(chat, 10);
  ASSERT_EQ(all.prompts.size(), 4u);
  EXPECT_EQ(all.prompts[0].tokens, (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(all.prompts[1].tokens, (std::vector<int64_t>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(all.prompts[2].tokens, (std::vector<int64_t>{20, 21, 22, 23}));
  EXPECT_EQ(all.prompts[3].tokens, (std::vector<int64_t>{30}));
  EXPECT_EQ(all.prompts[1].origin, "chat.h5 document 0, turn 2");
  EXPECT_EQ(all.eos_id, 3);
  EXPECT_FALSE(all.end_of_turn) << "the turns end in 13, 17, 21, 24 and 32: no one token ends them";
  EXPECT_EQ(inf::read_prompts(chat, 3).prompts.size(), 3u);

  // Every run of ones ending in the same token (as ChatML's <|im_end|> ends each assistant
  // turn): a response stops there.
  c.tokens = {10, 11, 12, 9, 14, 15, 16, 9, 20, 9, 22, 23, 9, 30, 31, 9};
  const auto chatml = path("chatml.h5");
  topotrain::data::write_token_dataset(chatml, c);
  EXPECT_EQ(inf::read_prompts(chatml, 10).end_of_turn, 9);

  c.loss_mask.clear();
  const auto plain = path("plain.h5");
  topotrain::data::write_token_dataset(plain, c);
  EXPECT_NE(config_error_of([&] { inf::read_prompts(plain, 4); }).find("has no /loss_mask"), std::string::npos);
}

TEST_F(PromptSetTest, JsonlLinesAreTokenPrompts) {
  const auto jsonl = file("p.jsonl", "{\"tokens\": [1, 2, 3]}\n\n{\"tokens\": [7]}\n{\"tokens\": [8, 9]}\n");
  const auto set = inf::read_prompts(jsonl, 2);
  ASSERT_EQ(set.prompts.size(), 2u);
  EXPECT_EQ(set.prompts[1].tokens, (std::vector<int64_t>{7}));
  EXPECT_EQ(set.prompts[1].origin, "p.jsonl line 3");
  EXPECT_FALSE(set.eos_id);
  EXPECT_NE(config_error_of([&] { inf::check_prompt_vocabulary(set, 3, "'t'"); })
                .find("prompt p.jsonl line 1 holds token id 3 but the target 't' has a vocabulary of 3"),
            std::string::npos);
  EXPECT_EQ(config_error_of([&] { inf::check_prompt_vocabulary(set, 8, "'t'"); }), "(no ConfigError)");
}

TEST_F(PromptSetTest, BadPromptFilesAreRefusedNamingTheFileAndTheFix) {
  const auto missing = path("missing.jsonl");
  EXPECT_NE(config_error_of([&] { inf::read_prompts(missing, 4); }).find("'" + missing + "' does not exist"),
            std::string::npos);
  const auto empty = file("empty.jsonl", "\n");
  EXPECT_NE(config_error_of([&] { inf::read_prompts(empty, 4); }).find("'" + empty + "' holds no prompt"),
            std::string::npos);
  const auto blank = file("blank.jsonl", "{\"tokens\": [1]}\n{\"tokens\": []}\n");
  EXPECT_NE(config_error_of([&] { inf::read_prompts(blank, 4); }).find("line 2 is an empty prompt"), std::string::npos);
  const auto negative = file("negative.jsonl", "{\"tokens\": [1, -2]}\n");
  EXPECT_NE(config_error_of([&] { inf::read_prompts(negative, 4); }).find("token -2 is not a non-negative integer id"),
            std::string::npos);
  const auto text = file("text.jsonl", "{\"text\": \"hello\"}\n");
  EXPECT_NE(config_error_of([&] { inf::read_prompts(text, 4); }).find("line 1 has no \"tokens\" array"),
            std::string::npos);
  const auto other = file("prompts.txt", "hello\n");
  EXPECT_NE(config_error_of([&] { inf::read_prompts(other, 4); }).find("neither a prepared dataset"),
            std::string::npos);
}
