// Dataset files: round trip through the writer, and one clear error per kind of bad file.
#include <gtest/gtest.h>

#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>

#include "test_dir.h"
#include "topotrain/core/error.h"
#include "topotrain/core/hdf5_handle.h"
#include "topotrain/data/token_dataset.h"

namespace topotrain::data {
namespace {

std::string temp_path(const std::string& name) {
  return test_file(name + ".h5");
}

TokenDatasetContents three_documents() {
  TokenDatasetContents c;
  c.tokens = {5, 6, 7, 1, 9, 9, 2, 3, 1};
  c.offsets = {0, 4, 6, 9};
  c.vocab_size = 10;
  c.eos_id = 1;
  c.tokenizer = "test";
  return c;
}

// Writes a file with raw HDF5 calls, independent of the writer under test, so that files
// the writer refuses to produce (broken offsets, out-of-range tokens) can be built.
struct RawFile {
  H5Handle file;
  explicit RawFile(const std::string& path)
      : file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose, "create " + path) {}
  template <typename T>
  void dataset(const char* name, hid_t type, const std::vector<T>& values) {
    hsize_t n = values.size();
    H5Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose, "space");
    H5Handle d(H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose, name);
    h5_check(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), name);
  }
  void attribute(const char* name, int64_t value) {
    H5Handle space(H5Screate(H5S_SCALAR), H5Sclose, "space");
    H5Handle a(H5Acreate2(file, name, H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose, name);
    h5_check(H5Awrite(a, H5T_NATIVE_INT64, &value), name);
  }
  // As h5py writes a Python str: variable-length UTF-8.
  void string_attribute(const char* name, const char* value) {
    H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "type");
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    H5Handle space(H5Screate(H5S_SCALAR), H5Sclose, "space");
    H5Handle a(H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose, name);
    h5_check(H5Awrite(a, type, &value), name);
  }
};

struct BadFile {
  std::string name;
  std::function<void(RawFile&)> build;
  std::string expected;  // part of the error message
};

void expect_load_error(const std::string& path, const std::string& expected) {
  try {
    TokenDataset::load(path);
    FAIL() << "loading " << path << " should fail with: " << expected;
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_NE(message.find(path), std::string::npos) << "the error must name the file: " << message;
  }
}

TEST(TokenDataset, RoundTripKeepsEveryFieldAndOmitsAllOnesMask) {
  const std::string path = temp_path("roundtrip");
  const TokenDatasetContents c = three_documents();
  write_token_dataset(path, c, WriteOptions{2, 4});
  const TokenDataset d = TokenDataset::load(path);
  EXPECT_EQ(d.contents().tokens, c.tokens);
  EXPECT_EQ(d.contents().offsets, c.offsets);
  EXPECT_FALSE(d.has_loss_mask());
  EXPECT_EQ(d.vocab_size(), 10u);
  EXPECT_EQ(d.eos_id(), 1u);
  EXPECT_EQ(d.tokenizer(), "test");
  ASSERT_EQ(d.num_samples(), 3u);
  const SampleView s = d.sample(1);
  EXPECT_EQ(s.length, 2u);
  EXPECT_EQ(s.tokens[0], 9u);
  EXPECT_EQ(s.loss_mask, nullptr);
  std::remove(path.c_str());
}

TEST(TokenDataset, LossMaskIsBackfilledWithOnesWhenItFirstMatters) {
  const std::string path = temp_path("mask");
  TokenDatasetWriter writer(path, 10, 1, "test", WriteOptions{3, 0});
  writer.append({5, 6, 7, 1}, {4}, {});
  writer.append({9, 9, 2, 3, 1}, {2, 3}, {1, 1, 0, 0, 1});
  writer.finish();
  const TokenDataset d = TokenDataset::load(path);
  EXPECT_EQ(d.contents().loss_mask, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 0, 0, 1}));
  EXPECT_EQ(d.contents().offsets, (std::vector<uint64_t>{0, 4, 6, 9}));
  EXPECT_EQ(d.sample(2).loss_mask[0], 0);
  std::remove(path.c_str());
}

TEST(TokenDataset, UnfinishedWriterLeavesNoFile) {
  const std::string path = temp_path("unfinished");
  std::remove(path.c_str());
  {
    TokenDatasetWriter writer(path, 10, 1, "test");
    writer.append({1, 2}, {2}, {});
  }
  EXPECT_FALSE(file_exists(path));
  EXPECT_FALSE(file_exists(path + ".tmp"));
}

TEST(TokenDataset, EachBadFileGetsItsOwnError) {
  const auto good = [](RawFile& f) {
    f.attribute("vocab_size", 10);
    f.attribute("eos_id", 1);
  };
  const std::vector<BadFile> cases = {
      {"no_tokens", [&](RawFile& f) { good(f); f.dataset<uint64_t>("offsets", H5T_NATIVE_UINT64, {0, 1}); },
       "has no /tokens dataset"},
      {"no_offsets", [&](RawFile& f) { good(f); f.dataset<uint32_t>("tokens", H5T_NATIVE_UINT32, {1}); },
       "has no /offsets dataset"},
      {"no_vocab",
       [&](RawFile& f) {
         f.attribute("eos_id", 1);
         f.dataset<uint32_t>("tokens", H5T_NATIVE_UINT32, {1});
         f.dataset<uint64_t>("offsets", H5T_NATIVE_UINT64, {0, 1});
       },
       "has no 'vocab_size' attribute"},
      {"not_monotonic",
       [&](RawFile& f) {
         good(f);
         f.dataset<uint32_t>("tokens", H5T_NATIVE_UINT32, {1, 2, 3, 4});
         f.dataset<uint64_t>("offsets", H5T_NATIVE_UINT64, {0, 3, 2, 4});
       },
       "offsets are not monotonic at index 2 (2 < 3)"},
      {"empty_document",
       [&](RawFile& f) {
         good(f);
         f.dataset<uint32_t>("tokens", H5T_NATIVE_UINT32, {1, 2});
         f.dataset<uint64_t>("offsets", H5T_NATIVE_UINT64, {0, 1, 1, 2});
       },
       "document 1 is empty"},
      {"offsets_past_end",
       [&](RawFile& f) {
         good(f);
         f.dataset<uint32_t>("tokens", H5T_NATIVE_UINT32, {1, 2});
         f.dataset<uint64_t>("offsets", H5T_NATIVE_UINT64, {0, 1, 5});
       },
       "the last offset is 5 but /tokens holds 2 tokens"},
      {"token_too_large",
       [&](RawFile& f) {
         good(f);
         f.dataset<uint32_t>("tokens", H5T_NATIVE_UINT32, {1, 2, 3, 12, 4});
         f.dataset<uint64_t>("offsets", H5T_NATIVE_UINT64, {0, 2, 5});
       },
       "token at index 3 is 12 >= vocab_size 10"},
      {"negative_token",
       [&](RawFile& f) {
         good(f);
         f.dataset<int64_t>("tokens", H5T_NATIVE_INT64, {1, -1});
         f.dataset<uint64_t>("offsets", H5T_NATIVE_UINT64, {0, 2});
       },
       "does not fit uint32"},
      {"float_tokens",
       [&](RawFile& f) {
         good(f);
         f.dataset<float>("tokens", H5T_NATIVE_FLOAT, {1, 2});
         f.dataset<uint64_t>("offsets", H5T_NATIVE_UINT64, {0, 2});
       },
       "/tokens in"},
      {"mask_length",
       [&](RawFile& f) {
         good(f);
         f.dataset<uint32_t>("tokens", H5T_NATIVE_UINT32, {1, 2, 3});
         f.dataset<uint64_t>("offsets", H5T_NATIVE_UINT64, {0, 3});
         f.dataset<uint8_t>("loss_mask", H5T_NATIVE_UINT8, {1, 0});
       },
       "/loss_mask has 2 entries but /tokens has 3"},
  };
  for (const BadFile& bad : cases) {
    SCOPED_TRACE(bad.name);
    const std::string path = temp_path(bad.name);
    {
      RawFile file(path);
      bad.build(file);
    }
    expect_load_error(path, bad.expected);
    std::remove(path.c_str());
  }
}

// A target is a token with mask 1 that is not its document's first; counted here by brute
// force over every token, independently of the per-sample sums the dataset keeps.
uint64_t targets_by_brute_force(const TokenDatasetContents& c) {
  uint64_t targets = 0;
  for (uint64_t t = 0; t < c.tokens.size(); ++t) {
    const bool first = std::find(c.offsets.begin(), c.offsets.end(), t) != c.offsets.end();
    if (!first && (c.loss_mask.empty() || c.loss_mask[t] == 1)) ++targets;
  }
  return targets;
}

TEST(TokenDataset, CountsEveryNextTokenTarget) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    TokenDatasetContents c;
    c.vocab_size = 10;
    const bool masked = trial % 2 == 1;
    for (uint32_t d = 0, docs = 1 + rng() % 6; d < docs; ++d) {
      for (uint32_t i = 0, length = 1 + rng() % 4; i < length; ++i) {
        c.tokens.push_back(rng() % 10);
        if (masked) c.loss_mask.push_back(rng() % 3 == 0);
      }
      c.offsets.push_back(c.tokens.size());
    }
    const uint64_t expected = targets_by_brute_force(c);
    const TokenDataset d = TokenDataset::from_contents(c, "random");
    EXPECT_EQ(d.num_loss_targets(), expected);
    if (expected > 0) {
      EXPECT_NO_THROW(d.require_loss_targets());
    } else {
      EXPECT_THROW(d.require_loss_targets(), ConfigError);
    }
  }
}

TEST(TokenDataset, NothingToTrainOnIsRefusedAtLoad) {
  const std::string refusal = "has no token with loss_mask 1 that follows another token of its document: nothing "
                              "to train on (";
  const auto file = [&](const char* name, std::vector<uint32_t> tokens, std::vector<uint64_t> offsets,
                        std::vector<uint8_t> mask) {
    const std::string path = temp_path(name);
    RawFile f(path);
    f.attribute("vocab_size", 10);
    f.attribute("eos_id", 1);
    f.dataset<uint32_t>("tokens", H5T_NATIVE_UINT32, tokens);
    f.dataset<uint64_t>("offsets", H5T_NATIVE_UINT64, offsets);
    if (!mask.empty()) f.dataset<uint8_t>("loss_mask", H5T_NATIVE_UINT8, mask);
    return path;
  };
  const std::string zeros = file("mask_all_zero", {5, 6, 7, 8}, {0, 2, 4}, {0, 0, 0, 0});
  expect_load_error(zeros, cat("'", zeros, "' ", refusal, "loss_mask is 0 at all 4 tokens)"));
  const std::string singles = file("one_token_documents", {5, 6, 7}, {0, 1, 2, 3}, {});
  expect_load_error(singles, cat(refusal, "each of its 3 documents is 1 token long)"));
  const std::string firsts = file("mask_on_first_tokens", {5, 6, 7, 8, 9}, {0, 2, 5}, {1, 0, 1, 0, 0});
  expect_load_error(firsts, cat(refusal, "each of its 2 tokens with loss_mask 1 is the first of its document)"));
  // One target is enough.
  const std::string one = file("one_target", {5, 6, 7, 8, 9}, {0, 2, 5}, {1, 0, 1, 0, 1});
  EXPECT_EQ(TokenDataset::load(one).num_loss_targets(), 1u);
}

TEST(TokenDataset, MissingOrForeignFileIsAConfigError) {
  expect_load_error(temp_path("does_not_exist"), "cannot open dataset file");
  const std::string path = temp_path("not_hdf5");
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("hello", f);
  std::fclose(f);
  expect_load_error(path, "not an HDF5 file");
  std::remove(path.c_str());
}

TEST(TokenDataset, FileAsH5pyWritesItLoads) {
  const std::string path = temp_path("int64");
  {
    RawFile f(path);
    f.string_attribute("tokenizer", "Qwen/Qwen3-8B");
    f.attribute("vocab_size", 300);
    f.attribute("eos_id", 0);
    f.dataset<int64_t>("tokens", H5T_NATIVE_INT64, {299, 0, 7});
    f.dataset<int32_t>("offsets", H5T_NATIVE_INT32, {0, 1, 3});
  }
  const TokenDataset d = TokenDataset::load(path);
  EXPECT_EQ(d.contents().tokens, (std::vector<uint32_t>{299, 0, 7}));
  EXPECT_EQ(d.sample_length(1), 2u);
  EXPECT_EQ(d.tokenizer(), "Qwen/Qwen3-8B");
  std::remove(path.c_str());
}

// CRC-32C bit by bit over the tokens' little-endian bytes: the reference the file's checksum
// must equal, independent of the library's table and instruction paths.
uint32_t reference_tokens_crc(const std::vector<uint32_t>& tokens) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint32_t token : tokens)
    for (int byte = 0; byte < 4; ++byte) {
      crc ^= (token >> (8 * byte)) & 0xFFu;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
    }
  return crc ^ 0xFFFFFFFFu;
}

// The token checksum a resume compares: stored by the writer over every append, computed at
// load (and timed) for a file without it, kept by a held-out split as the file's.
TEST(TokenDataset, TheTokensChecksumIsStoredOrComputedAtLoad) {
  const std::string path = temp_path("checksum");
  TokenDatasetWriter writer(path, 1000, 1, "test");
  writer.append({5, 6, 7, 1}, {4}, {});
  writer.append({999, 2, 3, 1, 0, 500}, {2, 4}, {});
  writer.finish();
  const std::vector<uint32_t> tokens = {5, 6, 7, 1, 999, 2, 3, 1, 0, 500};
  const TokenDataset stored = TokenDataset::load(path);
  EXPECT_EQ(stored.file_tokens_crc32c(), std::optional<uint32_t>(reference_tokens_crc(tokens)));
  EXPECT_TRUE(stored.contents().file_tokens_crc32c_verified);

  const std::string raw = temp_path("checksum_h5py");
  {
    RawFile f(raw);
    f.attribute("vocab_size", 1000);
    f.attribute("eos_id", 1);
    f.dataset<int64_t>("tokens", H5T_NATIVE_INT64, std::vector<int64_t>(tokens.begin(), tokens.end()));
    f.dataset<int32_t>("offsets", H5T_NATIVE_INT32, {0, 4, 6, 10});
  }
  const TokenDataset computed = TokenDataset::load(raw);
  EXPECT_EQ(computed.file_tokens_crc32c(), stored.file_tokens_crc32c());
  EXPECT_GT(computed.contents().file_tokens_crc32c_seconds, 0.0);
  EXPECT_FALSE(computed.contents().file_tokens_crc32c_verified);

  TokenDatasetContents in_memory = three_documents();
  EXPECT_FALSE(TokenDataset::from_contents(in_memory, "memory").file_tokens_crc32c());
  std::remove(path.c_str());
  std::remove(raw.c_str());
}

// Edits /tokens of a finished file in place, its attributes and other datasets kept, as h5py's
// `f["tokens"][...] = ...` does.
void edit_tokens(const std::string& path, const std::function<void(std::vector<uint32_t>&)>& edit) {
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose, "open " + path);
  H5Handle tokens(H5Dopen2(file, "tokens", H5P_DEFAULT), H5Dclose, "open /tokens");
  H5Handle space(H5Dget_space(tokens), H5Sclose, "space");
  std::vector<uint32_t> values(static_cast<size_t>(H5Sget_simple_extent_npoints(space)));
  h5_check(H5Dread(tokens, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), "read /tokens");
  edit(values);
  h5_check(H5Dwrite(tokens, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), "write /tokens");
}

void delete_from(const std::string& path, const char* dataset, const char* attribute) {
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose, "open " + path);
  if (dataset) h5_check(H5Ldelete(file, dataset, H5P_DEFAULT), dataset);
  if (attribute) h5_check(H5Adelete(file, attribute), attribute);
}

// 10 tokens in chunks of 4: [5 6 7 1] [999 2 3 1] [0 500], appended across a chunk's end.
std::string three_chunk_file(const std::string& name) {
  const std::string path = temp_path(name);
  TokenDatasetWriter writer(path, 1000, 1, "test", WriteOptions{4, 0});
  writer.append({5, 6, 7}, {3}, {});
  writer.append({1, 999, 2, 3, 1, 0, 500}, {1, 4, 2}, {});
  writer.finish();
  return path;
}

TEST(TokenDataset, TheWriterStoresEveryChunksChecksum) {
  const std::string path = three_chunk_file("chunk_crcs");
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "open " + path);
  H5Handle crcs(H5Dopen2(file, "tokens_chunk_crc32c", H5P_DEFAULT), H5Dclose, "open /tokens_chunk_crc32c");
  std::vector<uint32_t> stored(3);
  h5_check(H5Dread(crcs, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, stored.data()), "read");
  EXPECT_EQ(stored, (std::vector<uint32_t>{reference_tokens_crc({5, 6, 7, 1}), reference_tokens_crc({999, 2, 3, 1}),
                                           reference_tokens_crc({0, 500})}));
  H5Handle attr(H5Aopen(crcs, "chunk_tokens", H5P_DEFAULT), H5Aclose, "open chunk_tokens");
  int64_t chunk = 0;
  h5_check(H5Aread(attr, H5T_NATIVE_INT64, &chunk), "read chunk_tokens");
  EXPECT_EQ(chunk, 4);
  std::remove(path.c_str());
}

// A file whose tokens changed after topotrain-prepare wrote it (a flipped bit, every token
// rewritten with the attributes kept) is refused at load, naming the file, the chunks that
// differ and the fix; never trained on as if it were the file a run was started with.
TEST(TokenDataset, TokensThatDoNotMatchTheStoredChecksumAreRefused) {
  const std::string flipped = three_chunk_file("flipped_bit");
  edit_tokens(flipped, [](std::vector<uint32_t>& t) { t[5] ^= 1u; });
  expect_load_error(flipped, "its tokens do not match the checksum stored with them");
  expect_load_error(flipped, "1 of its 3 chunks of 4 tokens differ: tokens 4..7 (chunk 2)");
  expect_load_error(flipped, "restore the file the run was started with, or re-run topotrain-prepare");

  const std::string rewritten = three_chunk_file("every_token");
  edit_tokens(rewritten, [](std::vector<uint32_t>& t) {
    for (uint32_t& token : t) token = (token + 1) % 1000;
  });
  expect_load_error(rewritten, "3 of its 3 chunks of 4 tokens differ: tokens 0..3 (chunk 1), tokens 4..7 (chunk 2), "
                               "tokens 8..9 (chunk 3)");

  // Without per-chunk checksums (an older topotrain-prepare's file) the file as a whole differs.
  delete_from(flipped, "tokens_chunk_crc32c", nullptr);
  expect_load_error(flipped, "the file stores no per-chunk checksums, so its 10 tokens as a whole differ");

  // With the stored checksum dropped, the file loads; what identifies it to a resume is the
  // checksum of the tokens read, so a resume still tells it from the file it trained on.
  delete_from(flipped, nullptr, "tokens_crc32c");
  const TokenDataset edited = TokenDataset::load(flipped);
  EXPECT_FALSE(edited.contents().file_tokens_crc32c_verified);
  EXPECT_EQ(edited.file_tokens_crc32c(), std::optional<uint32_t>(reference_tokens_crc({5, 6, 7, 1, 999, 3, 3, 1, 0,
                                                                                       500})));
  std::remove(flipped.c_str());
  std::remove(rewritten.c_str());
}

TEST(TokenDataset, DemoCorpusIsByteTokenizedParagraphs) {
  const TokenDataset d = TokenDataset::load(TOPOTRAIN_DEMO_DATASET);
  EXPECT_EQ(d.tokenizer(), "byte");
  EXPECT_EQ(d.vocab_size(), 259u);
  EXPECT_GT(d.num_samples(), 500u);
  EXPECT_GT(d.num_tokens(), 200000u);
  EXPECT_FALSE(d.has_loss_mask());
  for (uint64_t i = 0; i < d.num_samples(); ++i) {
    const SampleView s = d.sample(i);
    ASSERT_EQ(s.tokens[s.length - 1], d.eos_id()) << "every paragraph ends with eos";
  }
}

}  // namespace
}  // namespace topotrain::data
