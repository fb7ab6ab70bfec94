#include "link_frame.h"

#include <ATen/ATen.h>

#include <cstring>
#include <stdexcept>

#include "topotrain/core/error.h"

namespace topotrain::comm::detail {
namespace {

constexpr std::size_t kFieldCount = 7;  // kind, tokens, sequences, columns, dtype, cursor, extra bytes

// The sequences of a batch as the sender counts them: its sample ids (-1 when it has none,
// which check_batch then refuses).
std::int64_t sequences_of(const PackedHiddenBatch& batch) {
  return batch.packed.sample_ids.defined() ? batch.packed.sample_ids.numel() : -1;
}

}  // namespace

void check_batch(const PackedHiddenBatch& batch) {
  const at::Tensor& hidden = batch.hidden;
  if (!hidden.defined() || hidden.dim() != 2 || !hidden.is_contiguous())
    throw std::invalid_argument("hidden-state link: the payload must be a contiguous [tokens, taps * hidden] tensor");
  bool cpu_float = hidden.is_cpu() && hidden.scalar_type() == at::kFloat;
  if (hidden.scalar_type() != at::kBFloat16 && !cpu_float)
    throw std::invalid_argument(cat("hidden-state link: the payload must be bf16 (fp32 on CPU), got ", hidden.scalar_type()));
  const std::int64_t sequences = sequences_of(batch);
  for (const PackedBatchField& field : kPackedBatchFields) {
    const at::Tensor& t = batch.packed.*field.member;
    const std::int64_t want = field_length(field.length, batch.tokens(), sequences);
    if (!t.defined() || t.dim() != 1 || t.numel() != want || !(at::isIntegralType(t.scalar_type(), /*includeBool=*/true)))
      throw std::invalid_argument(cat("hidden-state link: ", field.name, " must be a 1-D integer tensor of ", want,
                                      " elements for a batch of ", batch.tokens(), " tokens and ", sequences,
                                      " sequences"));
  }
  if (batch.cursor.defined() && (batch.cursor.dim() != 1 || batch.cursor.scalar_type() != at::kLong))
    throw std::invalid_argument("hidden-state link: cursor must be a 1-D int64 tensor (or undefined)");
  at::Tensor cu = batch.packed.cu_seqlens.to(at::kCPU, at::kLong);
  if (cu[0].item<std::int64_t>() != 0 || cu[-1].item<std::int64_t>() != batch.tokens() ||
      (cu.slice(0, 1) < cu.slice(0, 0, -1)).any().item<bool>())
    throw std::invalid_argument(cat("hidden-state link: cu_seqlens must run from 0 to the token count ", batch.tokens()));
}

std::vector<char> encode_frame(FrameKind kind, const PackedHiddenBatch* batch, const std::string& extra) {
  std::int64_t fields[kFieldCount] = {static_cast<std::int64_t>(kind), 0, 0, 0, 0, 0,
                                      static_cast<std::int64_t>(extra.size())};
  std::vector<at::Tensor> arrays;
  if (batch) {
    fields[1] = batch->tokens();
    fields[2] = sequences_of(*batch);
    fields[3] = batch->hidden.size(1);
    fields[4] = static_cast<std::int64_t>(batch->hidden.scalar_type());
    for (const PackedBatchField& field : kPackedBatchFields)
      arrays.push_back((batch->packed.*field.member).to(at::kCPU, field.dtype).contiguous());
    if (batch->cursor.defined()) {
      fields[5] = batch->cursor.numel();
      arrays.push_back(batch->cursor.to(at::kCPU).contiguous());
    }
  }
  std::size_t bytes = sizeof(fields) + extra.size();
  for (const at::Tensor& t : arrays) bytes += t.nbytes();
  std::vector<char> frame(bytes);
  char* at = frame.data();
  std::memcpy(at, fields, sizeof(fields));
  at += sizeof(fields);
  for (const at::Tensor& t : arrays) {
    std::memcpy(at, t.data_ptr(), t.nbytes());
    at += t.nbytes();
  }
  std::memcpy(at, extra.data(), extra.size());
  return frame;
}

DecodedFrame decode_frame(const std::vector<char>& bytes) {
  std::int64_t fields[kFieldCount];
  if (bytes.size() < sizeof(fields)) throw std::runtime_error("hidden-state link: truncated frame");
  std::memcpy(fields, bytes.data(), sizeof(fields));
  DecodedFrame frame;
  frame.fields = {static_cast<FrameKind>(fields[0]), fields[1], fields[2], fields[3], fields[4], fields[5]};
  const char* at = bytes.data() + sizeof(fields);
  std::size_t left = bytes.size() - sizeof(fields);
  auto take = [&](std::size_t n) {
    if (n > left) throw std::runtime_error("hidden-state link: frame shorter than its fields say");
    const char* from = at;
    at += n;
    left -= n;
    return from;
  };
  if (frame.fields.kind == FrameKind::data) {
    for (const PackedBatchField& field : kPackedBatchFields) {
      at::Tensor t = at::empty({field_length(field.length, frame.fields.tokens, frame.fields.sequences)}, field.dtype);
      std::memcpy(t.data_ptr(), take(t.nbytes()), t.nbytes());
      frame.header.packed.*field.member = t;
    }
    if (frame.fields.cursor > 0) {
      at::Tensor cursor = at::empty({frame.fields.cursor}, at::kLong);
      std::memcpy(cursor.data_ptr(), take(cursor.nbytes()), cursor.nbytes());
      frame.header.cursor = cursor;
    }
  }
  std::size_t extra = static_cast<std::size_t>(fields[6]);
  frame.extra.assign(take(extra), extra);
  if (left != 0) throw std::runtime_error("hidden-state link: frame longer than its fields say");
  if (frame.fields.kind == FrameKind::data) frame.header.packed.summarize();
  return frame;
}

}  // namespace topotrain::comm::detail
