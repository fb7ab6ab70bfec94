#include "topotrain/store/protobuf_wire.h"

#include <cstring>

namespace topotrain {

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
  static_assert(sizeof(double) == 8, "IEEE-754 binary64");
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  key(field, kFixed64);
  bytes_ += little_endian_bytes(bits, 8);
}

void ProtoMessage::float_field(int field, float value) {
  static_assert(sizeof(float) == 4, "IEEE-754 binary32");
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  key(field, kFixed32);
  bytes_ += little_endian_bytes(bits, 4);
}

void ProtoMessage::string_field(int field, const std::string& bytes) {
  key(field, kLengthDelimited);
  varint(bytes.size());
  bytes_ += bytes;
}

}  // namespace topotrain
