#include "topotrain/infer/prompt_set.h"

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/data/token_dataset.h"

namespace topotrain::infer {
namespace {

constexpr const char* kJsonlForm = "one prompt per line as {\"tokens\": [ids...]}";

}  // namespace

PromptSet dataset_prompts(const data::TokenDataset& dataset, int64_t max_prompts, const std::string& path) {
  if (!dataset.has_loss_mask()) {
    throw ConfigError(cat("dataset '", path, "' has no /loss_mask, so no assistant turn to cut a prompt before: ",
                          "prepare it from chat JSONL (\"messages\") with topotrain-prepare, or give a .jsonl file with ",
                          kJsonlForm));
  }
  PromptSet set;
  set.eos_id = static_cast<int64_t>(dataset.eos_id());
  const auto name = file_name(path);
  std::set<int64_t> turn_ends;  // the last token of every run of ones read
  for (uint64_t d = 0; d < dataset.num_samples() && static_cast<int64_t>(set.prompts.size()) < max_prompts; ++d) {
    const data::SampleView doc = dataset.sample(d);
    int64_t turn = 0;
    for (uint64_t i = 1; i < doc.length; ++i) {
      if (doc.loss_mask[i] && (i + 1 == doc.length || !doc.loss_mask[i + 1])) turn_ends.insert(doc.tokens[i]);
      if (!doc.loss_mask[i] || doc.loss_mask[i - 1]) continue;  // not the start of a run of ones
      if (static_cast<int64_t>(set.prompts.size()) == max_prompts) break;
      set.prompts.push_back({std::vector<int64_t>(doc.tokens, doc.tokens + i),
                             cat(name, " document ", d, ", turn ", ++turn)});
    }
  }
  if (turn_ends.size() == 1) set.end_of_turn = *turn_ends.begin();
  return set;
}

namespace {

PromptSet jsonl_prompts(const std::string& path, int64_t max_prompts) {
  std::ifstream in(path);
  if (!in) throw ConfigError(cat("cannot read the prompt file '", path, "'"));
  PromptSet set;
  const auto name = file_name(path);
  std::string line;
  for (int64_t number = 1; static_cast<int64_t>(set.prompts.size()) < max_prompts && std::getline(in, line);
       ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = cat("'", path, "' line ", number);
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw ConfigError(cat(where, " is not JSON (", e.what(), "); write ", kJsonlForm));
    }
    if (!value.is_object() || !value.contains("tokens") || !value["tokens"].is_array()) {
      throw ConfigError(cat(where, " has no \"tokens\" array; write ", kJsonlForm));
    }
    Prompt prompt{{}, cat(name, " line ", number)};
    for (const auto& id : value["tokens"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) {
        throw ConfigError(cat(where, ": token ", id.dump(), " is not a non-negative integer id"));
      }
      prompt.tokens.push_back(id.get<int64_t>());
    }
    if (prompt.tokens.empty()) {
      throw ConfigError(cat(where, " is an empty prompt: give every prompt at least one token, or remove the line"));
    }
    set.prompts.push_back(std::move(prompt));
  }
  return set;
}

}  // namespace

PromptSet read_prompts(const std::string& path, int64_t max_prompts) {
  if (max_prompts < 1) throw ConfigError(cat("the number of prompts must be >= 1, got ", max_prompts));
  if (!is_regular_file(path)) {
    throw ConfigError(cat("prompt file '", path, "' does not exist or is not a file: give a prepared dataset (.h5) or ",
                          "a .jsonl file with ", kJsonlForm));
  }
  const std::string extension = file_extension(path);
  PromptSet set;
  if (extension == ".h5") {
    set = dataset_prompts(data::TokenDataset::load(path), max_prompts, path);
  } else if (extension == ".jsonl") {
    set = jsonl_prompts(path, max_prompts);
  } else {
    throw ConfigError(cat("prompt file '", path, "' is neither a prepared dataset (.h5) nor a .jsonl file with ",
                          kJsonlForm));
  }
  if (set.prompts.empty()) {
    throw ConfigError(cat("prompt file '", path, "' holds no prompt: ",
                          extension == ".h5" ? "no document has an assistant turn (a run of loss_mask 1) after "
                                                   "its first token"
                                                 : cat("write ", kJsonlForm)));
  }
  return set;
}

void check_prompt_vocabulary(const PromptSet& set, int64_t vocab_size, const std::string& target) {
  for (const Prompt& prompt : set.prompts) {
    for (int64_t id : prompt.tokens) {
      if (id >= vocab_size) {
        throw ConfigError(cat("prompt ", prompt.origin, " holds token id ", id, " but the target ", target,
                              " has a vocabulary of ", vocab_size, ": the prompts were tokenized for another model"));
      }
    }
  }
}

}  // namespace topotrain::infer
