// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and final xor
// 0xFFFFFFFF), the checksum of TFRecord framing (store/tensorboard_events.h), of every tensor a
// checkpoint stores (store/checkpoint_file.h) and of a dataset's tokens (data/token_dataset.h). Ours because Debian 12 ships no C or C++ library
// with CRC-32C (only the Python binding python3-crc32c). x86-64 CPUs with SSE 4.2 compute it
// with their crc32 instruction (several GB/s, for checkpoints of gigabytes); others with a
// byte-wise table (a few hundred MB/s).
#pragma once

#include <cstddef>
#include <cstdint>

namespace topotrain {

// The CRC-32C of `size` bytes at `data`: crc32c("123456789") = 0xE3069283 (RFC 3720). Given
// the CRC-32C of the bytes before them as `before`, that of all of them: a writer checksums a
// stream piece by piece, crc32c(b, m, crc32c(a, n)) == the CRC-32C of a's n bytes then b's m.
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t before = 0);

}  // namespace topotrain
