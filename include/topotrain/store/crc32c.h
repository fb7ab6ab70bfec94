// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and final xor
// 0xFFFFFFFF), the checksum of TFRecord framing (tensorboard_events.h) and of every tensor a
// checkpoint stores (checkpoint_file.h). Ours because Debian 12 ships no C or C++ library
// with CRC-32C (only the Python binding python3-crc32c). x86-64 CPUs with SSE 4.2 compute it
// with their crc32 instruction (several GB/s, for checkpoints of gigabytes); others with a
// byte-wise table (a few hundred MB/s).
#pragma once

#include <cstddef>
#include <cstdint>

namespace topotrain {

// The CRC-32C of `size` bytes at `data`: crc32c("123456789") = 0xE3069283 (RFC 3720).
std::uint32_t crc32c(const void* data, std::size_t size);

}  // namespace topotrain
