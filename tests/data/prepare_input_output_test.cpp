// topotrain-prepare's files: binary inputs are refused before anything is tokenized, naming
// the file and how to convert it (binary_input.h); the output's folder is created.
#include <gtest/gtest.h>

#include <fstream>

#include "test_dir.h"
#include "topotrain/core/error.h"
#include "topotrain/data/prepare.h"

namespace topotrain::data {
namespace {

std::string write_input(const std::string& name, const std::string& bytes) {
  const std::string path = test_file(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// prepare_dataset's ConfigError for `inputs` ("" when it does not throw); nothing may be written.
std::string refusal(const std::vector<std::string>& inputs, const std::string& tokenizer = "byte") {
  PrepareConfig config;
  config.inputs = inputs;
  config.output = test_file("never/out.h5");
  config.tokenizer = tokenizer;
  try {
    prepare_dataset(config);
  } catch (const ConfigError& e) {
    EXPECT_FALSE(file_exists(config.output));
    EXPECT_FALSE(file_exists(config.output + ".tmp"));
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "got: " << (text)

const std::string kBinaryTail("\0\0\x15\x1c\x02\x00", 6);

TEST(PrepareInput, ContainersAreRefusedByTheirMagicWithTheConversion) {
  const std::string good = write_input("good.jsonl", "{\"text\": \"a\"}\n");
  // Among good inputs and before them: a refusal comes before hours of tokenizing the rest.
  const std::string parquet = write_input("train-00000.parquet", "PAR1" + kBinaryTail);
  std::string m = refusal({good, parquet});
  EXPECT_CONTAINS(m, "input '" + parquet + "' is a Parquet file, not text or JSONL; convert it to JSONL first, e.g. "
                     "python3 -c \"import pandas as pd; pd.read_parquet('" + parquet + "').to_json('" +
                     test_file("train-00000.jsonl") + "', orient='records', lines=True, force_ascii=False)\"");
  // Named .jsonl, read as JSONL: still refused as what it is, not as invalid JSON.
  const std::string feather = write_input("data.jsonl", "ARROW1" + kBinaryTail);
  EXPECT_CONTAINS(refusal({feather}), "input '" + feather + "' is an Arrow IPC file (Feather), not text or JSONL; "
                                      "convert it to JSONL first, e.g. python3 -c \"import pandas as pd; "
                                      "pd.read_feather('" + feather + "')");
  const std::string stream = write_input("cache.arrow", "\xff\xff\xff\xff" + kBinaryTail);
  EXPECT_CONTAINS(refusal({stream}), "is an Arrow IPC stream (e.g. a Hugging Face datasets cache file), not text or "
                                     "JSONL; convert it to JSONL first, e.g. python3 -c \"from datasets import "
                                     "Dataset; Dataset.from_file('" + stream + "')");
  const std::string gz = write_input("corpus.jsonl.gz", "\x1f\x8b\x08" + kBinaryTail);
  EXPECT_CONTAINS(refusal({gz}), "input '" + gz + "' is gzip-compressed, not text or JSONL; decompress it first, e.g. "
                                 "gunzip -k '" + gz + "'");
  const std::string zst = write_input("corpus.txt.zst", "\x28\xb5\x2f\xfd" + kBinaryTail);
  EXPECT_CONTAINS(refusal({zst}),
                  "input '" + zst + "' is zstd-compressed, not text or JSONL; decompress it first, e.g. zstd -d");
  const std::string h5 = write_input("old.h5", "\x89HDF\r\n\x1a\n" + kBinaryTail);
  EXPECT_CONTAINS(refusal({h5}), "input '" + h5 + "' is an HDF5 file");
  const std::string utf16 = write_input("utf16.txt", std::string("\xff\xfeh\0i\0", 6));
  EXPECT_CONTAINS(refusal({utf16}), "is UTF-16 text (little-endian byte-order mark), not text or JSONL; convert it to "
                                    "UTF-8 first, e.g. iconv -f UTF-16 -t UTF-8 '" + utf16 + "'");
}

// alpaca_data.json is one pretty-printed JSON array: refused as such, with the conversion.
TEST(PrepareInput, AJsonArrayIsNotJsonLines) {
  const std::string array =
      write_input("alpaca_data.json", "  \n[\n  {\"instruction\": \"a\", \"output\": \"b\"}\n]\n");
  EXPECT_CONTAINS(refusal({array}), "input '" + array + "' is a JSON array, not JSON Lines (one object per line); "
                                    "convert it, e.g. jq -c '.[]' '" + array + "' > out.jsonl");
  // As text, it is text.
  PrepareConfig config;
  config.inputs = {array};
  config.format = InputFormat::text;
  config.output = test_file("array_as_text.h5");
  EXPECT_EQ(prepare_dataset(config).documents, 1u);
}

// The byte tokenizer would take any byte as a token: a NUL byte tells binary from text.
TEST(PrepareInput, NulBytesAreRefusedNamingTheLine) {
  const std::string text = write_input("nul.txt", std::string("first\nsecond\nthi\0rd\n", 20));
  EXPECT_CONTAINS(refusal({text}), text + ":3: a NUL byte, which no UTF-8 text holds: the file is binary data, or "
                                   "UTF-16/UTF-32 text (convert that with iconv -f UTF-16 -t UTF-8 '" + text + "')");
  const std::string jsonl = write_input("nul.jsonl", std::string("{\"text\": \"a\"}\n{\"text\": \"b\0\"}\n", 30));
  EXPECT_CONTAINS(refusal({jsonl}), jsonl + ":2: a NUL byte");
  // Before the tokenizer's own refusal of bytes that are not UTF-8 (advice to run iconv).
  const std::string qwen3 = std::string(TOPOTRAIN_SOURCE_DIR) + "/../shared/data/qwen3-tokenizer/tokenizer.json";
  if (!std::ifstream(qwen3)) GTEST_SKIP() << "no Qwen3 tokenizer.json at " << qwen3;
  const std::string mixed = write_input("mixed.bin", std::string("\xc3\x28\0\x01", 4));
  EXPECT_CONTAINS(refusal({mixed}, qwen3), mixed + ":1: a NUL byte");
}

TEST(PrepareOutput, TheOutputFolderIsCreated) {
  PrepareConfig config;
  config.inputs = {write_input("hello.txt", "hello")};
  config.output = test_file("made/for/it/train.h5");
  EXPECT_EQ(prepare_dataset(config).documents, 1u);
  EXPECT_EQ(TokenDataset::load(config.output).num_tokens(), 6u);
  // A folder that cannot be made: the OS's reason, as bad input (exit 2).
  write_input("a_file", "");
  config.output = test_file("a_file/train.h5");
  try {
    prepare_dataset(config);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_CONTAINS(std::string(e.what()), "cannot write '" + config.output + "': cannot create directory '" +
                                               test_file("a_file") + "'");
    EXPECT_CONTAINS(std::string(e.what()), "Not a directory");
  }
  // A refused input leaves no new folder behind.
  config.inputs = {write_input("x.parquet", "PAR1" + kBinaryTail)};
  config.output = test_file("not_made/train.h5");
  EXPECT_THROW(prepare_dataset(config), ConfigError);
  EXPECT_FALSE(file_exists(test_file("not_made")));
}

}  // namespace
}  // namespace topotrain::data
