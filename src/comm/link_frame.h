// The wire format of the hidden-state link's MPI messages (internal header).
//
// One header message per batch: fixed fields, then the header arrays (the tensor fields of the
// batch's PackedBatch, in kPackedBatchFields' order and dtypes, then the cursor), then transport
// bytes (IPC slot and handles) or, for an error frame, the reason. Tags keep data frames
// (accepted only while the receiver's queue has room) apart from control frames (close,
// error: always accepted).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "topotrain/comm/hidden_state_link.h"

namespace topotrain::comm::detail {

enum LinkTag : int { kDataTag = 1, kControlTag = 2, kPayloadTag = 3, kCreditTag = 4, kSetupTag = 5, kStopTag = 6 };
enum class FrameKind : std::int64_t { data = 1, close = 2, error = 3 };

struct FrameFields {
  FrameKind kind = FrameKind::data;
  std::int64_t tokens = 0;
  std::int64_t sequences = 0;
  std::int64_t columns = 0;  // payload row length (taps * hidden)
  std::int64_t dtype = 0;    // at::ScalarType of the payload
  std::int64_t cursor = 0;   // elements of the batch's cursor
};

struct DecodedFrame {
  FrameFields fields;
  PackedHiddenBatch header;  // all but hidden, on the CPU, summarized
  std::string extra;         // transport bytes, or an error or early close frame's reason
};

// Checks the batch's shapes and types; throws std::invalid_argument naming what is wrong.
void check_batch(const PackedHiddenBatch& batch);
std::vector<char> encode_frame(FrameKind kind, const PackedHiddenBatch* batch, const std::string& extra);
// Throws std::runtime_error when the bytes are not a well-formed frame, std::invalid_argument
// when its cu_seqlens does not run from 0 up to the token count.
DecodedFrame decode_frame(const std::vector<char>& bytes);

}  // namespace topotrain::comm::detail
