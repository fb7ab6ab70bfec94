#include "topotrain/data/token_dataset.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <numeric>

#include "topotrain/core/crc32c.h"
#include "topotrain/core/error.h"
#include "topotrain/core/hdf5_handle.h"
#include "topotrain/core/io_failure.h"

namespace topotrain::data {
namespace {

constexpr const char* kFormatHint = "write it with topotrain-prepare or h5py as docs/data.md shows";
constexpr const char* kTokenizerFiles = "tokenizer_files";
constexpr const char* kTokensCrc = "tokens_crc32c";
// The CRC-32C of every chunk_tokens tokens (the last chunk shorter): what says where a file
// whose tokens_crc32c does not match its tokens was changed.
constexpr const char* kChunkCrcs = "tokens_chunk_crc32c";
constexpr const char* kChunkTokens = "chunk_tokens";

// The checksum of tokens as the file stores them, little-endian uint32, continuing `before`.
uint32_t tokens_crc32c(const uint32_t* tokens, size_t count, uint32_t before) {
  static_assert(sizeof(uint32_t) == 4, "tokens are 4 bytes");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tokens_crc32c reads tokens in the host's byte order, which must be little-endian as the file's"
#endif
  return crc32c(tokens, count * sizeof(uint32_t), before);
}

// Makes HDF5 fail a read instead of silently clamping a value that does not fit the
// memory type (a negative token id read as uint32 would otherwise become 0).
H5T_conv_ret_t abort_on_range_error(H5T_conv_except_t kind, hid_t, hid_t, void*, void*, void*) {
  if (kind == H5T_CONV_EXCEPT_RANGE_HI || kind == H5T_CONV_EXCEPT_RANGE_LOW) return H5T_CONV_ABORT;
  return H5T_CONV_UNHANDLED;
}

// Opens the one-dimensional integer dataset /name and sets `length` to its entries.
H5Handle open_integer_dataset(hid_t file, const std::string& path, const char* name, const char* wanted,
                              hsize_t& length) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) {
    throw ConfigError(cat("dataset file '", path, "' has no /", name, " dataset; ", kFormatHint));
  }
  H5Handle dset(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose, cat("cannot open /", name, " in '", path, "'"));
  H5Handle type(H5Dget_type(dset), H5Tclose, cat("cannot read the type of /", name, " in '", path, "'"));
  if (H5Tget_class(type) != H5T_INTEGER) {
    throw ConfigError(cat("/", name, " in '", path, "' does not hold integers; store it as ", wanted));
  }
  H5Handle space(H5Dget_space(dset), H5Sclose, cat("cannot read the shape of /", name, " in '", path, "'"));
  if (H5Sget_simple_extent_ndims(space) != 1) {
    throw ConfigError(cat("/", name, " in '", path, "' must be one-dimensional (", wanted, " [n])"));
  }
  H5Sget_simple_extent_dims(space, &length, nullptr);
  return dset;
}

template <typename T>
std::vector<T> read_integer_dataset(hid_t file, const std::string& path, const char* name,
                                    hid_t mem_type, const char* wanted, bool required) {
  if (!required && H5Lexists(file, name, H5P_DEFAULT) <= 0) return {};
  hsize_t n = 0;
  H5Handle dset = open_integer_dataset(file, path, name, wanted, n);
  std::vector<T> values(n);
  if (n == 0) return values;
  H5Handle xfer(H5Pcreate(H5P_DATASET_XFER), H5Pclose, "cannot create an HDF5 transfer list");
  h5_check(H5Pset_type_conv_cb(xfer, abort_on_range_error, nullptr), "cannot set an HDF5 conversion callback");
  if (H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, xfer, values.data()) < 0) {
    throw ConfigError(cat("cannot read /", name, " from '", path, "': unreadable, or a value does not fit ",
                          wanted, " (negative or too large); ", kFormatHint));
  }
  return values;
}

int64_t read_int_attribute(hid_t file, const std::string& path, const char* name) {
  if (H5Aexists(file, name) <= 0) {
    throw ConfigError(cat("dataset file '", path, "' has no '", name, "' attribute on its root; ", kFormatHint));
  }
  H5Handle attr(H5Aopen(file, name, H5P_DEFAULT), H5Aclose, cat("cannot open attribute '", name, "' of '", path, "'"));
  H5Handle type(H5Aget_type(attr), H5Tclose, cat("cannot read attribute '", name, "' of '", path, "'"));
  if (H5Tget_class(type) != H5T_INTEGER) {
    throw ConfigError(cat("attribute '", name, "' of '", path, "' must be an integer"));
  }
  int64_t value = 0;
  h5_check(H5Aread(attr, H5T_NATIVE_INT64, &value), cat("cannot read attribute '", name, "' of '", path, "'"));
  return value;
}

// h5py writes str attributes as variable-length strings, our writer as fixed-length ones.
std::string read_string_attribute(hid_t file, const std::string& path, const char* name) {
  if (H5Aexists(file, name) <= 0) return "";
  H5Handle attr(H5Aopen(file, name, H5P_DEFAULT), H5Aclose, cat("cannot open attribute '", name, "' of '", path, "'"));
  H5Handle type(H5Aget_type(attr), H5Tclose, cat("cannot read attribute '", name, "' of '", path, "'"));
  if (H5Tget_class(type) != H5T_STRING) {
    throw ConfigError(cat("attribute '", name, "' of '", path, "' must be a string"));
  }
  if (H5Tis_variable_str(type) > 0) {
    char* text = nullptr;
    H5Handle mem(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create an HDF5 string type");
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));
    h5_check(H5Aread(attr, mem, &text), cat("cannot read attribute '", name, "' of '", path, "'"));
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  std::string value(H5Tget_size(type), '\0');
  h5_check(H5Aread(attr, type, value.data()), cat("cannot read attribute '", name, "' of '", path, "'"));
  return value.substr(0, value.find('\0'));
}

void validate(const TokenDatasetContents& c, const std::string& origin) {
  const std::string fix_offsets = "offsets[d] must be the index of document d's first token, strictly increasing, "
                                  "from 0 to the number of tokens";
  if (c.vocab_size == 0 || c.vocab_size > (uint64_t{1} << 32)) {
    throw ConfigError(cat("'", origin, "': vocab_size ", c.vocab_size, " is out of range (1 .. 2^32)"));
  }
  if (c.eos_id >= c.vocab_size) {
    throw ConfigError(cat("'", origin, "': eos_id ", c.eos_id, " >= vocab_size ", c.vocab_size,
                          "; set the attributes of the tokenizer that produced the tokens"));
  }
  if (c.offsets.size() < 2) {
    throw ConfigError(cat("'", origin, "' holds no documents (/offsets needs docs + 1 >= 2 entries)"));
  }
  if (c.offsets.front() != 0) {
    throw ConfigError(cat("'", origin, "': offsets[0] is ", c.offsets.front(), ", must be 0; ", fix_offsets));
  }
  for (size_t i = 1; i < c.offsets.size(); ++i) {
    if (c.offsets[i] < c.offsets[i - 1]) {
      throw ConfigError(cat("'", origin, "': offsets are not monotonic at index ", i, " (", c.offsets[i], " < ",
                            c.offsets[i - 1], "); ", fix_offsets));
    }
    if (c.offsets[i] == c.offsets[i - 1]) {
      throw ConfigError(cat("'", origin, "': document ", i - 1, " is empty (offsets[", i - 1, "] == offsets[", i,
                            "] == ", c.offsets[i], "); drop empty documents when writing the file"));
    }
  }
  if (c.offsets.back() != c.tokens.size()) {
    throw ConfigError(cat("'", origin, "': offsets out of range: the last offset is ", c.offsets.back(),
                          " but /tokens holds ", c.tokens.size(), " tokens; ", fix_offsets));
  }
  uint32_t max_token = 0;
  for (uint32_t t : c.tokens) max_token = t > max_token ? t : max_token;
  if (max_token >= c.vocab_size) {
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      if (c.tokens[i] >= c.vocab_size) {
        throw ConfigError(cat("'", origin, "': token at index ", i, " is ", c.tokens[i], " >= vocab_size ",
                              c.vocab_size, "; re-tokenize with the tokenizer the file names, or fix vocab_size"));
      }
    }
  }
  if (!c.loss_mask.empty()) {
    if (c.loss_mask.size() != c.tokens.size()) {
      throw ConfigError(cat("'", origin, "': /loss_mask has ", c.loss_mask.size(), " entries but /tokens has ",
                            c.tokens.size(), "; write one mask byte per token"));
    }
    for (size_t i = 0; i < c.loss_mask.size(); ++i) {
      if (c.loss_mask[i] > 1) {
        throw ConfigError(cat("'", origin, "': loss_mask at index ", i, " is ", int(c.loss_mask[i]),
                              "; the mask holds 0 or 1"));
      }
    }
  }
}

H5Handle create_extendible(hid_t file, const char* name, hid_t file_type, const WriteOptions& options,
                           const std::string& path) {
  hsize_t dims = 0, maxdims = H5S_UNLIMITED, chunk = options.chunk_tokens;
  H5Handle space(H5Screate_simple(1, &dims, &maxdims), H5Sclose, "cannot create an HDF5 dataspace");
  H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "cannot create an HDF5 property list");
  h5_check(H5Pset_chunk(dcpl, 1, &chunk), cat("cannot chunk /", name, " of '", path, "'"));
  if (options.gzip_level > 0) {
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0) {
      throw ConfigError("this HDF5 library has no deflate filter; write the dataset without compression");
    }
    h5_check(H5Pset_deflate(dcpl, static_cast<unsigned>(options.gzip_level)), "cannot enable deflate");
  }
  return H5Handle(H5Dcreate2(file, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose,
                  cat("cannot create /", name, " in '", path, "'"));
}

void append_rows(hid_t dset, hid_t mem_type, uint64_t old_size, uint64_t count, const void* data,
                 const std::string& what) {
  if (count == 0) return;
  hsize_t new_size = old_size + count, start = old_size, n = count;
  h5_check(H5Dset_extent(dset, &new_size), "cannot extend " + what);
  H5Handle file_space(H5Dget_space(dset), H5Sclose, "cannot get the dataspace of " + what);
  h5_check(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &start, nullptr, &n, nullptr), "cannot select " + what);
  H5Handle mem_space(H5Screate_simple(1, &n, nullptr), H5Sclose, "cannot create an HDF5 dataspace");
  h5_check(H5Dwrite(dset, mem_type, mem_space, file_space, H5P_DEFAULT, data), "cannot write " + what);
}

void write_int_attribute(hid_t file, const char* name, int64_t value) {
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose, "cannot create an HDF5 dataspace");
  H5Handle attr(H5Acreate2(file, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                cat("cannot create attribute ", name));
  h5_check(H5Awrite(attr, H5T_NATIVE_INT64, &value), cat("cannot write attribute ", name));
}

void write_string_attribute(hid_t file, const char* name, const std::string& value) {
  H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create an HDF5 string type");
  H5Tset_size(type, value.empty() ? 1 : value.size());
  H5Tset_cset(type, H5T_CSET_UTF8);
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose, "cannot create an HDF5 dataspace");
  H5Handle attr(H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                cat("cannot create attribute ", name));
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  h5_check(H5Awrite(attr, type, padded.data()), cat("cannot write attribute ", name));
}

}  // namespace

SampleView TokenDataset::sample(uint64_t i) const {
  const uint64_t begin = contents_.offsets[i];
  return SampleView{contents_.tokens.data() + begin,
                    contents_.loss_mask.empty() ? nullptr : contents_.loss_mask.data() + begin,
                    contents_.offsets[i + 1] - begin};
}

uint64_t TokenDataset::loss_tokens(uint64_t i, uint64_t begin, uint64_t end) const {
  if (contents_.loss_mask.empty()) return end - begin;
  if (begin == 0 && end == sample_length(i)) return sample_loss_tokens_[i];
  const uint8_t* mask = contents_.loss_mask.data() + contents_.offsets[i];
  uint64_t ones = 0;
  for (uint64_t t = begin; t < end; ++t) ones += mask[t];
  return ones;
}

uint64_t TokenDataset::loss_targets(uint64_t i, uint64_t begin, uint64_t end) const {
  if (end <= begin) return 0;
  const uint64_t first = contents_.loss_mask.empty() ? 1 : contents_.loss_mask[contents_.offsets[i] + begin];
  return loss_tokens(i, begin, end) - first;
}

TokenDataset TokenDataset::from_contents(TokenDatasetContents contents, const std::string& origin) {
  validate(contents, origin);
  TokenDataset dataset;
  dataset.contents_ = std::move(contents);
  dataset.path_ = origin;
  const TokenDatasetContents& c = dataset.contents_;
  if (c.loss_mask.empty()) {
    dataset.loss_targets_ = dataset.num_tokens() - dataset.num_samples();
  } else {
    dataset.sample_loss_tokens_.resize(dataset.num_samples());
    for (uint64_t d = 0; d < dataset.num_samples(); ++d) {
      uint64_t ones = 0;
      for (uint64_t t = c.offsets[d]; t < c.offsets[d + 1]; ++t) ones += c.loss_mask[t];
      dataset.sample_loss_tokens_[d] = ones;
      dataset.loss_targets_ += ones - c.loss_mask[c.offsets[d]];
    }
  }
  return dataset;
}

std::string no_loss_targets_reason(uint64_t documents, uint64_t tokens, uint64_t loss_tokens) {
  const std::string why = loss_tokens == 0 ? cat("loss_mask is 0 at all ", tokens, " tokens")
                          : tokens == documents ? cat("each of its ", documents, " documents is 1 token long")
                                                : cat("each of its ", loss_tokens,
                                                      " tokens with loss_mask 1 is the first of its document");
  return cat("no token with loss_mask 1 that follows another token of its document: nothing to train on (", why,
             ")");
}

void TokenDataset::require_loss_targets() const {
  if (loss_targets_ > 0) return;
  const uint64_t loss_tokens =
      has_loss_mask() ? std::accumulate(sample_loss_tokens_.begin(), sample_loss_tokens_.end(), uint64_t{0})
                      : num_tokens();
  throw ConfigError(cat("'", path_, "' has ", no_loss_targets_reason(num_samples(), num_tokens(), loss_tokens),
                        "; train on documents of 2 or more tokens with loss_mask 1 on what the model should learn "
                        "to predict"));
}

namespace {

H5Handle open_dataset_file(const std::string& path) {
  h5_quiet();
  hid_t raw = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (raw < 0) {
    throw ConfigError(cat("cannot open dataset file '", path, "': missing or not an HDF5 file; ", kFormatHint));
  }
  return H5Handle(raw, H5Fclose, path);
}

TokenDatasetHeader header_of(hid_t file, const std::string& path) {
  const int64_t vocab = read_int_attribute(file, path, "vocab_size");
  const int64_t eos = read_int_attribute(file, path, "eos_id");
  if (vocab <= 0 || eos < 0) {
    throw ConfigError(cat("'", path, "': vocab_size (", vocab, ") must be positive and eos_id (", eos,
                          ") non-negative"));
  }
  hsize_t tokens = 0;
  open_integer_dataset(file, path, "tokens", "uint32", tokens);
  return {static_cast<uint64_t>(vocab), static_cast<uint64_t>(eos), read_string_attribute(file, path, "tokenizer"),
          static_cast<uint64_t>(tokens)};
}

// Where `tokens` differ from what the file's writer checksummed, from its per-chunk CRCs:
// "tokens 0..65535 (chunk 1 of 16 of 65536 tokens)", up to three chunks and how many in all;
// empty when the file has no per-chunk CRCs that fit its tokens (h5py's, an older
// topotrain-prepare's).
std::string changed_chunks(hid_t file, const std::string& path, const std::vector<uint32_t>& tokens) {
  const std::vector<uint32_t> stored =
      read_integer_dataset<uint32_t>(file, path, kChunkCrcs, H5T_NATIVE_UINT32, "uint32", false);
  if (stored.empty()) return "";
  H5Handle dset(H5Dopen2(file, kChunkCrcs, H5P_DEFAULT), H5Dclose, cat("cannot open /", kChunkCrcs, " in '", path, "'"));
  if (H5Aexists(dset, kChunkTokens) <= 0) return "";
  const int64_t stored_chunk = read_int_attribute(dset, path, kChunkTokens);
  if (stored_chunk <= 0) return "";
  const auto chunk = static_cast<uint64_t>(stored_chunk);
  if (stored.size() != (tokens.size() + chunk - 1) / chunk) return "";
  std::string listed;
  uint64_t changed = 0;
  for (uint64_t i = 0; i < stored.size(); ++i) {
    const uint64_t begin = i * chunk, count = std::min<uint64_t>(chunk, tokens.size() - begin);
    if (tokens_crc32c(tokens.data() + begin, count, 0) == stored[i]) continue;
    if (++changed <= 3)
      listed += cat(changed > 1 ? ", " : "", "tokens ", begin, "..", begin + count - 1, " (chunk ", i + 1, ")");
  }
  if (changed == 0) return "";
  return cat(changed, " of its ", stored.size(), " chunks of ", chunk, " tokens differ: ", listed,
             changed > 3 ? ", ..." : "");
}

// A file whose tokens do not match the tokens_crc32c stored with them was changed or damaged
// after it was written: training on it, or resuming a run on it, would silently learn other
// data than the run was started with.
std::string tokens_changed_message(hid_t file, const std::string& path, const std::vector<uint32_t>& tokens,
                                   uint32_t stored, uint32_t read) {
  std::string where = changed_chunks(file, path, tokens);
  if (where.empty()) where = cat("the file stores no per-chunk checksums, so its ", tokens.size(),
                                 " tokens as a whole differ");
  return cat("dataset file '", path, "': its tokens do not match the checksum stored with them (tokens_crc32c ",
             stored, ", the tokens read give ", read, "): ", where,
             ". The file was changed or damaged after it was written: restore the file the run was started with, "
             "or re-run topotrain-prepare to write it again (a file edited on purpose must drop its tokens_crc32c "
             "attribute and /", kChunkCrcs, " dataset, and then starts a new run)");
}

}  // namespace

TokenDatasetHeader TokenDataset::read_header(const std::string& path) {
  return header_of(open_dataset_file(path), path);
}

TokenizerFiles TokenDataset::stored_tokenizer_files(const std::string& path) {
  H5Handle file = open_dataset_file(path);
  TokenizerFiles files;
  if (H5Lexists(file, kTokenizerFiles, H5P_DEFAULT) <= 0) return files;
  H5Handle group(H5Gopen2(file, kTokenizerFiles, H5P_DEFAULT), H5Gclose, cat("cannot open /", kTokenizerFiles, " in '", path, "'"));
  H5G_info_t info{};
  h5_check(H5Gget_info(group, &info), cat("cannot list /", kTokenizerFiles, " in '", path, "'"));
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t length = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    std::string name(static_cast<size_t>(std::max<ssize_t>(length, 0)), '\0');
    if (length <= 0 || H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1,
                                          H5P_DEFAULT) < 0)
      throw ConfigError(cat("cannot list /", kTokenizerFiles, " in '", path, "'"));
    const std::string where = cat(kTokenizerFiles, "/", name);
    const std::vector<uint8_t> bytes =
        read_integer_dataset<uint8_t>(file, path, where.c_str(), H5T_NATIVE_UINT8, "uint8", true);
    files[name] = std::string(bytes.begin(), bytes.end());
  }
  return files;
}

TokenDataset TokenDataset::load(const std::string& path) {
  H5Handle file = open_dataset_file(path);
  TokenDatasetHeader header = header_of(file, path);
  TokenDatasetContents c;
  c.vocab_size = header.vocab_size;
  c.eos_id = header.eos_id;
  c.tokenizer = std::move(header.tokenizer);
  c.tokens = read_integer_dataset<uint32_t>(file, path, "tokens", H5T_NATIVE_UINT32, "uint32", true);
  const auto started = std::chrono::steady_clock::now();
  const uint32_t crc = tokens_crc32c(c.tokens.data(), c.tokens.size(), 0);
  c.file_tokens_crc32c_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (H5Aexists(file, kTokensCrc) > 0) {
    const auto stored = static_cast<uint32_t>(read_int_attribute(file, path, kTokensCrc));
    if (stored != crc) throw ConfigError(tokens_changed_message(file, path, c.tokens, stored, crc));
    c.file_tokens_crc32c_verified = true;
  }
  c.file_tokens_crc32c = crc;
  c.offsets = read_integer_dataset<uint64_t>(file, path, "offsets", H5T_NATIVE_UINT64, "uint64", true);
  c.loss_mask = read_integer_dataset<uint8_t>(file, path, "loss_mask", H5T_NATIVE_UINT8, "uint8", false);
  TokenDataset dataset = from_contents(std::move(c), path);
  dataset.require_loss_targets();
  return dataset;
}

struct TokenDatasetWriter::Impl {
  std::string path, tmp_path;
  WriteOptions options;
  uint64_t vocab_size, eos_id;
  std::string tokenizer;
  TokenizerFiles tokenizer_files;
  H5Handle file, tokens, loss_mask;
  uint32_t tokens_crc = 0;  // of the tokens appended so far
  std::vector<uint32_t> chunk_crcs;  // of every whole chunk of chunk_tokens appended so far
  uint32_t chunk_crc = 0;            // of the tokens of the chunk being filled
  uint64_t chunk_filled = 0;         // tokens in it
  bool finished = false;

  void checksum(const uint32_t* data, uint64_t count) {
    tokens_crc = tokens_crc32c(data, count, tokens_crc);
    while (count > 0) {
      const uint64_t take = std::min(count, options.chunk_tokens - chunk_filled);
      chunk_crc = tokens_crc32c(data, take, chunk_crc);
      chunk_filled += take;
      data += take;
      count -= take;
      if (chunk_filled == options.chunk_tokens) {
        chunk_crcs.push_back(chunk_crc);
        chunk_crc = 0;
        chunk_filled = 0;
      }
    }
  }
};

TokenDatasetWriter::TokenDatasetWriter(const std::string& path, uint64_t vocab_size, uint64_t eos_id,
                                       const std::string& tokenizer, WriteOptions options)
    : impl_(new Impl) {
  h5_quiet();
  impl_->path = path;
  impl_->tmp_path = path + ".tmp";
  impl_->options = options;
  impl_->vocab_size = vocab_size;
  impl_->eos_id = eos_id;
  impl_->tokenizer = tokenizer;
  const hid_t file = H5Fcreate(impl_->tmp_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  // The output path is the user's to fix (another folder, a writable mount): bad input.
  if (file < 0)
    throw ConfigError(cat("cannot create '", impl_->tmp_path, "': ", errno ? os_error_text(errno) : "not writable",
                          "; write the output into a folder that exists and is writable"));
  impl_->file = H5Handle(file, H5Fclose, impl_->tmp_path);
  impl_->tokens = create_extendible(impl_->file, "tokens", H5T_STD_U32LE, options, path);
}

TokenDatasetWriter::~TokenDatasetWriter() {
  if (!impl_->finished) {
    impl_->tokens.reset();
    impl_->loss_mask.reset();
    impl_->file.reset();
    std::remove(impl_->tmp_path.c_str());
  }
}

void TokenDatasetWriter::append(const std::vector<uint32_t>& tokens, const std::vector<uint64_t>& lengths,
                                const std::vector<uint8_t>& loss_mask) {
  uint64_t total = 0;
  for (uint64_t n : lengths) {
    if (n == 0) throw std::runtime_error(cat("empty document appended to '", impl_->path, "'"));
    total += n;
    offsets_.push_back(offsets_.back() + n);
  }
  if (total != tokens.size() || (!loss_mask.empty() && loss_mask.size() != tokens.size())) {
    throw std::runtime_error(cat("TokenDatasetWriter::append: ", tokens.size(), " tokens, ", loss_mask.size(),
                                 " mask entries, documents of ", total, " tokens"));
  }
  bool all_ones = true;
  for (uint8_t m : loss_mask) all_ones &= (m == 1);
  if (!all_ones && !impl_->loss_mask.valid()) {
    impl_->loss_mask = create_extendible(impl_->file, "loss_mask", H5T_STD_U8LE, impl_->options, impl_->path);
    const std::vector<uint8_t> ones(std::min<uint64_t>(tokens_written_, impl_->options.chunk_tokens), 1);
    for (uint64_t done = 0; done < tokens_written_; done += ones.size()) {
      append_rows(impl_->loss_mask, H5T_NATIVE_UINT8, done, std::min<uint64_t>(ones.size(), tokens_written_ - done),
                  ones.data(), "/loss_mask");
    }
  }
  append_rows(impl_->tokens, H5T_NATIVE_UINT32, tokens_written_, tokens.size(), tokens.data(), "/tokens");
  impl_->checksum(tokens.data(), tokens.size());
  if (impl_->loss_mask.valid()) {
    const std::vector<uint8_t> ones(loss_mask.empty() ? tokens.size() : 0, 1);
    append_rows(impl_->loss_mask, H5T_NATIVE_UINT8, tokens_written_, tokens.size(),
                loss_mask.empty() ? ones.data() : loss_mask.data(), "/loss_mask");
  }
  tokens_written_ += tokens.size();
}

void TokenDatasetWriter::set_tokenizer_files(TokenizerFiles files) { impl_->tokenizer_files = std::move(files); }

void TokenDatasetWriter::finish() {
  hsize_t n = offsets_.size();
  H5Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose, "cannot create an HDF5 dataspace");
  H5Handle offsets(H5Dcreate2(impl_->file, "offsets", H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                   H5Dclose, cat("cannot create /offsets in '", impl_->path, "'"));
  h5_check(H5Dwrite(offsets, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offsets_.data()),
           cat("cannot write /offsets of '", impl_->path, "'"));
  write_int_attribute(impl_->file, "vocab_size", static_cast<int64_t>(impl_->vocab_size));
  write_int_attribute(impl_->file, "eos_id", static_cast<int64_t>(impl_->eos_id));
  write_string_attribute(impl_->file, "tokenizer", impl_->tokenizer);
  write_int_attribute(impl_->file, kTokensCrc, static_cast<int64_t>(impl_->tokens_crc));
  if (impl_->chunk_filled > 0) impl_->chunk_crcs.push_back(impl_->chunk_crc);
  hsize_t chunks = impl_->chunk_crcs.size();
  H5Handle chunk_space(H5Screate_simple(1, &chunks, nullptr), H5Sclose, "cannot create an HDF5 dataspace");
  H5Handle chunk_crc_set(H5Dcreate2(impl_->file, kChunkCrcs, H5T_STD_U32LE, chunk_space, H5P_DEFAULT, H5P_DEFAULT,
                                    H5P_DEFAULT),
                         H5Dclose, cat("cannot create /", kChunkCrcs, " in '", impl_->path, "'"));
  if (chunks > 0)
    h5_check(H5Dwrite(chunk_crc_set, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, impl_->chunk_crcs.data()),
             cat("cannot write /", kChunkCrcs, " of '", impl_->path, "'"));
  write_int_attribute(chunk_crc_set, kChunkTokens, static_cast<int64_t>(impl_->options.chunk_tokens));
  chunk_crc_set.reset();
  if (!impl_->tokenizer_files.empty()) {
    H5Handle group(H5Gcreate2(impl_->file, kTokenizerFiles, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                   cat("cannot create /", kTokenizerFiles, " in '", impl_->path, "'"));
    for (const auto& [name, bytes] : impl_->tokenizer_files) {
      hsize_t length = bytes.size();
      H5Handle file_space(H5Screate_simple(1, &length, nullptr), H5Sclose, "cannot create an HDF5 dataspace");
      H5Handle stored(H5Dcreate2(group, name.c_str(), H5T_STD_U8LE, file_space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                      H5Dclose, cat("cannot create /", kTokenizerFiles, "/", name, " in '", impl_->path, "'"));
      if (length > 0)
        h5_check(H5Dwrite(stored, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()),
                 cat("cannot write /", kTokenizerFiles, "/", name, " of '", impl_->path, "'"));
    }
  }
  offsets.reset();
  impl_->tokens.reset();
  impl_->loss_mask.reset();
  impl_->file.reset();
  if (std::rename(impl_->tmp_path.c_str(), impl_->path.c_str()) != 0) {
    throw std::runtime_error(cat("cannot rename '", impl_->tmp_path, "' to '", impl_->path, "'"));
  }
  impl_->finished = true;
}

void write_token_dataset(const std::string& path, const TokenDatasetContents& contents, WriteOptions options) {
  // A chunk is allocated whole: no chunk larger than the data for small files.
  options.chunk_tokens = std::max<uint64_t>(1, std::min<uint64_t>(options.chunk_tokens, contents.tokens.size()));
  TokenDatasetWriter writer(path, contents.vocab_size, contents.eos_id, contents.tokenizer, options);
  std::vector<uint64_t> lengths;
  for (size_t i = 1; i < contents.offsets.size(); ++i) lengths.push_back(contents.offsets[i] - contents.offsets[i - 1]);
  writer.append(contents.tokens, lengths, contents.loss_mask);
  writer.finish();
}

}  // namespace topotrain::data
