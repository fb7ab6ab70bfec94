// Refuses topotrain-prepare inputs that are not text, before any byte is tokenized.
//
// Without this a Parquet file or a gzip is read as text: the byte tokenizer takes any byte
// and "tokenizes" the container, and a tokenizer.json refuses it as bad UTF-8 with advice to
// run iconv, which cannot help. So the reader checks each input's first bytes against the
// magic numbers of the containers SFT data is shipped in, and every text it reads for NUL
// bytes (which no UTF-8 text file holds; UTF-16 text does). The ConfigError names the file,
// what it is and the command that converts it.
//
//   magic at byte 0                 | refused as
//   "PAR1"                          | Parquet
//   "ARROW1"                        | Arrow IPC file (Feather v2)
//   ff ff ff ff                     | Arrow IPC stream (a Hugging Face datasets cache file)
//   1f 8b                           | gzip (--gzip compresses the output, it reads no input)
//   28 b5 2f fd                     | zstd
//   fd "7zXZ" 00                    | xz
//   "PK" 03 04                      | zip
//   89 "HDF" 0d 0a 1a 0a            | HDF5 (a prepared dataset is an output, not an input)
//   ff fe or fe ff                  | UTF-16 text (its byte-order mark)
//   a NUL byte anywhere             | binary data or UTF-16/32 text
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace topotrain::data {

// `head`: the file's first bytes (8 or all of a shorter file). Throws ConfigError for a
// container listed above.
void refuse_binary_container(const std::string& path, std::string_view head);

// Throws ConfigError, naming path:line, when `text` holds a NUL byte; `first_line` is the
// line number of text's first byte in the file.
void refuse_nul_bytes(const std::string& path, uint64_t first_line, std::string_view text);

}  // namespace topotrain::data
