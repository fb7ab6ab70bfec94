// The prompts topotrain-speculate decodes, read from a prepared dataset or a JSONL file.
//
// A dataset (.h5, data::TokenDataset) gives one prompt per assistant turn: the tokens of its
// document before each maximal run of loss_mask = 1 (a run at the document's start has no
// prompt and gives none). So a held-out split of chat data is a prompt set as it is; a dataset
// without a loss mask marks no turns and is refused. A .jsonl file holds one prompt per
// line, {"tokens": [ids...]}; blank lines are skipped.
//
// Every error is a ConfigError naming the file (and line or document) and the fix.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "topotrain/data/token_dataset.h"

namespace topotrain::infer {

struct Prompt {
  std::vector<int64_t> tokens;
  std::string origin;  // "chat.h5 document 3, turn 2", "prompts.jsonl line 5"
};

struct PromptSet {
  std::vector<Prompt> prompts;
  std::optional<int64_t> eos_id;  // a dataset's end-of-document token
  // A dataset's end of an assistant turn: the token that ends every run of loss_mask = 1 in
  // the documents read (<|im_end|> in ChatML data), where one token ends them all; a response
  // stops there as the data's turns do.
  std::optional<int64_t> end_of_turn;
};

// The first `max_prompts` prompts of the file, in file order; at least one.
PromptSet read_prompts(const std::string& path, int64_t max_prompts);
// The first `max_prompts` prompts of a dataset already loaded (none when it holds no assistant
// turn); `path` names it in errors and origins.
PromptSet dataset_prompts(const data::TokenDataset& dataset, int64_t max_prompts, const std::string& path);

// Refuses a token id at or above `vocab_size` (the target's, named by `target`).
void check_prompt_vocabulary(const PromptSet& set, int64_t vocab_size, const std::string& target);

}  // namespace topotrain::infer
