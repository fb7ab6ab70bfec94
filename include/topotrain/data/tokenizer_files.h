// The files a Hugging Face tokenizer is loaded from (tokenizer.json; tokenizer_config.json,
// which holds the special tokens and the chat template; special_tokens_map.json and
// chat_template.jinja where a folder has them), carried by value from topotrain-prepare into
// the dataset file, from the training set into every checkpoint and out of topotrain-export
// beside the weights: AutoTokenizer.from_pretrained on an export loads the tokenizer its
// model was trained with, and generate knows the ids to stop at. Nothing reads them to
// train: they travel so that the path of the tokenizer folder need not.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace topotrain::data {

// File name (no directory) -> bytes.
using TokenizerFiles = std::map<std::string, std::string>;

// The names carried, tokenizer.json first.
const std::vector<std::string>& tokenizer_file_names();

// tokenizer.json at `tokenizer_json` and each other carried file found beside it. ConfigError
// names a file that exists but cannot be read.
TokenizerFiles read_tokenizer_files(const std::string& tokenizer_json);

// Writes every file into `directory` (which must exist); returns the paths, in name order.
std::vector<std::string> write_tokenizer_files(const TokenizerFiles& files, const std::string& directory);

// The ids of the special tokens tokenizer_config.json names (bos_token, eos_token, pad_token:
// a string or an {"content": ...} object), looked up in tokenizer.json's added tokens, then
// its vocabulary. A token named but found in neither is a ConfigError naming it (the files
// disagree); one not named, or null, is nullopt.
struct SpecialTokenIds {
  std::optional<int64_t> bos, eos, pad;
};
SpecialTokenIds special_token_ids(const TokenizerFiles& files);

}  // namespace topotrain::data
