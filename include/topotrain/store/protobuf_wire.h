// The protocol buffers wire format, encoding side only: a message built field by field
// into its serialized bytes, for the few fixed messages topotrain writes (TensorBoard's
// Event and Summary, tensorboard_events.h). Hand-written because the messages are four
// and tiny: libprotobuf would need TensorFlow's .proto files and code generation.
//
//   ProtoMessage value;
//   value.string_field(1, "train/loss");   // length-delimited (wire type 2)
//   value.float_field(2, 3.5f);            // fixed32 (wire type 5)
//   ProtoMessage summary;
//   summary.message_field(1, value);       // a sub-message is length-delimited too
//
// Fields come out in the order they are added; integers are varints (negative int64 as
// their two's complement, ten bytes, as protobuf's int64 is).
#pragma once

#include <cstdint>
#include <string>

namespace topotrain {

// The low `size` bytes of `value`, least significant first: the wire format's fixed32 and
// fixed64 (TFRecord's framing uses the same).
std::string little_endian_bytes(std::uint64_t value, int size);

class ProtoMessage {
 public:
  void varint_field(int field, std::uint64_t value);  // uint64, int64, bool, enum
  void int64_field(int field, std::int64_t value) { varint_field(field, static_cast<std::uint64_t>(value)); }
  void double_field(int field, double value);         // fixed64
  void float_field(int field, float value);           // fixed32
  void string_field(int field, const std::string& bytes);  // string, bytes
  void message_field(int field, const ProtoMessage& message) { string_field(field, message.bytes()); }

  const std::string& bytes() const { return bytes_; }

 private:
  enum WireType : unsigned { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };
  void key(int field, WireType type);
  void varint(std::uint64_t value);

  std::string bytes_;
};

}  // namespace topotrain
