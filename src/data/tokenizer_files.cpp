#include "topotrain/data/tokenizer_files.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"

namespace topotrain::data {
namespace {

using json = nlohmann::json;

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  if (!in || !(bytes << in.rdbuf()))
    throw ConfigError(cat("cannot read tokenizer file '", path, "'; check its permissions"));
  return bytes.str();
}

json parse_file(const TokenizerFiles& files, const std::string& name) {
  try {
    return json::parse(files.at(name));
  } catch (const json::parse_error& e) {
    throw ConfigError(cat("the tokenizer's ", name, " is not valid JSON (", e.what(), ")"));
  }
}

// tokenizer_config.json names a special token as its text or as an AddedToken object.
std::optional<std::string> named_token(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && it->at("content").is_string())
    return it->at("content").get<std::string>();
  throw ConfigError(cat("the tokenizer's tokenizer_config.json: ", key, " is neither a string nor {\"content\": ...}"));
}

}  // namespace

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                                 "chat_template.jinja"};
  return names;
}

TokenizerFiles read_tokenizer_files(const std::string& tokenizer_json) {
  TokenizerFiles files;
  files["tokenizer.json"] = read_whole_file(tokenizer_json);
  const std::string folder = parent_directory(tokenizer_json);
  for (const std::string& name : tokenizer_file_names()) {
    const std::string path = join_path(folder, name);
    if (name != "tokenizer.json" && is_regular_file(path)) files[name] = read_whole_file(path);
  }
  return files;
}

std::vector<std::string> write_tokenizer_files(const TokenizerFiles& files, const std::string& directory) {
  std::vector<std::string> written;
  for (const auto& [name, bytes] : files) {
    const std::string path = join_path(directory, name);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!(out << bytes) || !out.flush()) throw ConfigError(cat("cannot write '", path, "'"));
    written.push_back(path);
  }
  return written;
}

SpecialTokenIds special_token_ids(const TokenizerFiles& files) {
  SpecialTokenIds ids;
  if (!files.count("tokenizer.json") || !files.count("tokenizer_config.json")) return ids;
  const json config = parse_file(files, "tokenizer_config.json");
  const json tokenizer = parse_file(files, "tokenizer.json");
  auto id_of = [&](const char* key) -> std::optional<int64_t> {
    const std::optional<std::string> content = named_token(config, key);
    if (!content) return std::nullopt;
    if (const auto added = tokenizer.find("added_tokens"); added != tokenizer.end() && added->is_array())
      for (const json& token : *added)
        if (token.value("content", std::string()) == *content && token.contains("id")) return token.at("id").get<int64_t>();
    const json vocab = tokenizer.value(json::json_pointer("/model/vocab"), json::object());
    if (vocab.is_object() && vocab.contains(*content)) return vocab.at(*content).get<int64_t>();
    throw ConfigError(cat("the tokenizer's tokenizer_config.json names ", key, " \"", *content,
                          "\", which its tokenizer.json holds neither as an added token nor in its vocabulary"));
  };
  ids.bos = id_of("bos_token");
  ids.eos = id_of("eos_token");
  ids.pad = id_of("pad_token");
  return ids;
}

}  // namespace topotrain::data
