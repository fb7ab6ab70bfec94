// What checking a dataset's tokens against their stored CRC-32C costs at load: writes a file
// of N tokens as topotrain-prepare does (documents of 1000 tokens, stored checksums), then
// times TokenDataset::load and, on raw HDF5, the two ways to verify: reading /tokens whole
// and checksumming the memory after, or checksumming each piece of 1 M tokens right after
// it is read (while it is still in the CPU's caches).
//   bench_data_dataset_load PATH [tokens_millions]   (default 1000; PATH is removed at the end)
#include <hdf5.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "topotrain/core/crc32c.h"
#include "topotrain/core/hdf5_handle.h"
#include "topotrain/data/token_dataset.h"

using namespace topotrain;
using namespace topotrain::data;

namespace {

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void write(const std::string& path, uint64_t total) {
  constexpr uint64_t kDocument = 1000, kAppend = 1 << 20;
  TokenDatasetWriter writer(path, 151936, 151643, "bench");
  std::vector<uint32_t> tokens(kAppend);
  uint32_t state = 1;
  for (uint64_t done = 0; done < total; done += kAppend) {
    const uint64_t n = std::min(kAppend, total - done);
    tokens.resize(n);
    for (uint32_t& t : tokens) t = (state = state * 1664525u + 1013904223u) % 151936u;
    std::vector<uint64_t> lengths(n / kDocument, kDocument);
    if (n % kDocument) lengths.push_back(n % kDocument);
    writer.append(tokens, lengths, {});
  }
  writer.finish();
}

// Reads /tokens in pieces of `piece` tokens (all at once when 0), checksumming each piece
// right after its read, or the whole after the last when `after`.
void raw_read(const std::string& path, uint64_t piece, bool after) {
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "open " + path);
  H5Handle dset(H5Dopen2(file, "tokens", H5P_DEFAULT), H5Dclose, "open /tokens");
  H5Handle space(H5Dget_space(dset), H5Sclose, "space");
  hsize_t total = 0;
  H5Sget_simple_extent_dims(space, &total, nullptr);
  if (piece == 0) piece = total;
  std::vector<uint32_t> tokens(total);
  double read_seconds = 0, crc_seconds = 0;
  uint32_t crc = 0;
  for (hsize_t start = 0; start < total; start += piece) {
    hsize_t count = std::min<hsize_t>(piece, total - start);
    auto started = std::chrono::steady_clock::now();
    H5Handle file_space(H5Dget_space(dset), H5Sclose, "space");
    h5_check(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &start, nullptr, &count, nullptr), "select");
    H5Handle memory(H5Screate_simple(1, &count, nullptr), H5Sclose, "space");
    h5_check(H5Dread(dset, H5T_NATIVE_UINT32, memory, file_space, H5P_DEFAULT, tokens.data() + start), "read");
    read_seconds += since(started);
    if (after) continue;
    started = std::chrono::steady_clock::now();
    crc = crc32c(tokens.data() + start, count * 4, crc);
    crc_seconds += since(started);
  }
  if (after) {
    const auto started = std::chrono::steady_clock::now();
    crc = crc32c(tokens.data(), total * 4);
    crc_seconds = since(started);
  }
  std::printf("  %-44s read %.2f s + CRC-32C %.2f s = %.2f s (crc %08x)\n",
              after ? "read whole, then checksum the memory:" : "read 1 M-token pieces, checksum each:",
              read_seconds, crc_seconds, read_seconds + crc_seconds, crc);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_data_dataset_load PATH [tokens_millions]\n");
    return 2;
  }
  const std::string path = argv[1];
  const uint64_t total = static_cast<uint64_t>(argc > 2 ? std::atof(argv[2]) : 1000) * 1000000;
  auto started = std::chrono::steady_clock::now();
  write(path, total);
  std::printf("wrote %llu tokens in %.1f s (page cache warm for what follows)\n",
              static_cast<unsigned long long>(total), since(started));
  for (int round = 0; round < 2; ++round) {
    started = std::chrono::steady_clock::now();
    const TokenDataset dataset = TokenDataset::load(path);
    const double seconds = since(started);
    const double crc = dataset.contents().file_tokens_crc32c_seconds;
    std::printf("TokenDataset::load: %.2f s, of which verifying the tokens' CRC-32C %.2f s (%.0f%%, %.1f GB/s); "
                "without it %.2f s\n",
                seconds, crc, 100 * crc / seconds, total * 4 / crc / 1e9, seconds - crc);
  }
  raw_read(path, 0, true);
  raw_read(path, 1 << 20, false);
  std::remove(path.c_str());
  return 0;
}
