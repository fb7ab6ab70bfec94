#include "topotrain/store/protobuf_wire.h"

#include <cstring>
#include <limits>

namespace topotrain {
namespace {

// The IEEE-754 bits of `value` (binary64 or binary32), as the wire format stores them.
template <typename Bits, typename Float>
Bits ieee_bits(Float value) {
  static_assert(sizeof(Bits) == sizeof(Float) && std::numeric_limits<Float>::is_iec559, "IEEE-754 floats");
  Bits bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

}  // namespace

void ProtoMessage::key(int field, WireType type) { varint((static_cast<std::uint64_t>(field) << 3) | type); }

void ProtoMessage::varint(std::uint64_t value) {
  while (value >= 0x80) {
    bytes_.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  bytes_.push_back(static_cast<char>(value));
}

std::string little_endian_bytes(std::uint64_t value, int size) {
  std::string bytes;
  for (int i = 0; i < size; ++i) bytes.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
  return bytes;
}

void ProtoMessage::varint_field(int field, std::uint64_t value) {
  key(field, kVarint);
  varint(value);
}

void ProtoMessage::double_field(int field, double value) {
  key(field, kFixed64);
  bytes_ += little_endian_bytes(ieee_bits<std::uint64_t>(value), 8);
}

void ProtoMessage::float_field(int field, float value) {
  key(field, kFixed32);
  bytes_ += little_endian_bytes(ieee_bits<std::uint32_t>(value), 4);
}

void ProtoMessage::string_field(int field, const std::string& bytes) {
  key(field, kLengthDelimited);
  varint(bytes.size());
  bytes_ += bytes;
}

}  // namespace topotrain
