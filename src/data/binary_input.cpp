#include "topotrain/data/binary_input.h"

#include <algorithm>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"

namespace topotrain::data {
namespace {

// Where the advice writes the converted file: the input's name with .jsonl for its
// extension ("shard.parquet" -> "shard.jsonl"; "shard" -> "shard.jsonl").
std::string jsonl_beside(const std::string& path) {
  const std::string ext = file_extension(path);
  return path.substr(0, path.size() - ext.size()) + ".jsonl";
}

std::string pandas_to_jsonl(const std::string& read_call, const std::string& path) {
  return cat("python3 -c \"import pandas as pd; pd.", read_call, "('", path, "').to_json('", jsonl_beside(path),
             "', orient='records', lines=True, force_ascii=False)\"");
}

struct Container {
  std::string_view magic;
  const char* what;
  std::string (*advice)(const std::string& path);
};

// The string_views hold NUL and high bytes, so each gets its length explicitly.
const Container kContainers[] = {
    {{"PAR1", 4}, "a Parquet file",
     [](const std::string& p) {
       return cat("convert it to JSONL first, e.g. ", pandas_to_jsonl("read_parquet", p),
                  " (or with the datasets library: Dataset.from_parquet('", p, "').to_json('", jsonl_beside(p), "'))");
     }},
    {{"ARROW1", 6}, "an Arrow IPC file (Feather)",
     [](const std::string& p) { return cat("convert it to JSONL first, e.g. ", pandas_to_jsonl("read_feather", p)); }},
    {{"\xff\xff\xff\xff", 4}, "an Arrow IPC stream (e.g. a Hugging Face datasets cache file)",
     [](const std::string& p) {
       return cat("convert it to JSONL first, e.g. python3 -c \"from datasets import Dataset; Dataset.from_file('", p,
                  "').to_json('", jsonl_beside(p), "')\"");
     }},
    {{"\x1f\x8b", 2}, "gzip-compressed",
     [](const std::string& p) {
       return cat("decompress it first, e.g. gunzip -k '", p,
                  "' (topotrain-prepare reads uncompressed text or JSONL; --gzip sets the output's compression)");
     }},
    {{"\x28\xb5\x2f\xfd", 4}, "zstd-compressed",
     [](const std::string& p) { return cat("decompress it first, e.g. zstd -d '", p, "'"); }},
    {{"\xfd" "7zXZ\0", 6}, "xz-compressed",
     [](const std::string& p) { return cat("decompress it first, e.g. xz -dk '", p, "'"); }},
    {{"PK\x03\x04", 4}, "a zip archive",
     [](const std::string& p) { return cat("extract it first, e.g. unzip '", p, "', and pass the files inside"); }},
    {{"\x89HDF\r\n\x1a\n", 8}, "an HDF5 file (a prepared dataset is topotrain-prepare's output, not an input)",
     [](const std::string&) {
       return std::string("pass it to training as --set data.path=FILE, or pass the text or JSONL it was made from");
     }},
    {{"\xff\xfe", 2}, "UTF-16 text (little-endian byte-order mark)",
     [](const std::string& p) { return cat("convert it to UTF-8 first, e.g. iconv -f UTF-16 -t UTF-8 '", p, "'"); }},
    {{"\xfe\xff", 2}, "UTF-16 text (big-endian byte-order mark)",
     [](const std::string& p) { return cat("convert it to UTF-8 first, e.g. iconv -f UTF-16 -t UTF-8 '", p, "'"); }},
};

}  // namespace

void refuse_binary_container(const std::string& path, std::string_view head) {
  // Longest magic first would only matter if one were a prefix of another; none is.
  for (const Container& c : kContainers) {
    if (head.substr(0, c.magic.size()) == c.magic) {
      throw ConfigError(cat("input '", path, "' is ", c.what, ", not text or JSONL; ", c.advice(path)));
    }
  }
}

void refuse_nul_bytes(const std::string& path, uint64_t first_line, std::string_view text) {
  const size_t nul = text.find('\0');
  if (nul == std::string_view::npos) return;
  const uint64_t line = first_line + std::count(text.begin(), text.begin() + nul, '\n');
  throw ConfigError(cat(path, ":", line, ": a NUL byte, which no UTF-8 text holds: the file is binary data, or "
                        "UTF-16/UTF-32 text (convert that with iconv -f UTF-16 -t UTF-8 '", path,
                        "'); topotrain-prepare reads UTF-8 text and JSONL"));
}

}  // namespace topotrain::data
