#include "topotrain/store/tensorboard_events.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "topotrain/core/files.h"
#include "topotrain/core/error.h"
#include "topotrain/core/io_failure.h"
#include "topotrain/core/crc32c.h"
#include "topotrain/store/protobuf_wire.h"

namespace topotrain {
namespace {

// Field numbers of tensorflow.Event, Summary and Summary.Value (tensorflow/core/util/event.proto,
// tensorflow/core/framework/summary.proto).
constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr int kSummaryValue = 1;
constexpr int kValueTag = 1, kValueSimpleValue = 2;

// TFRecord's CRC mask: a CRC of data that holds CRCs is then no CRC of its own.
std::uint32_t masked_crc(const void* data, std::size_t size) {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// A name no earlier writer took: two launches within one second would otherwise only
// differ by pid, which a container may reuse.
std::string new_file_in(const std::string& dir) {
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string base = join_path(dir, cat("events.out.tfevents.", seconds, ".", host_name(), ".", getpid()));
  std::string path = base;
  for (int n = 1; file_exists(path); ++n) path = cat(base, ".", n);
  return path;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  make_directories(dir);
  path_ = new_file_in(dir);
  out_.open(path_, std::ios::binary);
  if (!out_) throw std::runtime_error(cat("cannot create ", path_, write_failure_detail(errno, path_)));
  ProtoMessage event;
  event.double_field(kEventWallTime,
                     std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  event.string_field(kEventFileVersion, "brain.Event:2");
  write_record(event.bytes());
}

void TensorBoardWriter::add_scalars(std::int64_t step, double wall_time, const std::vector<Scalar>& scalars) {
  ProtoMessage summary;
  for (const Scalar& scalar : scalars) {
    if (!std::isfinite(scalar.value)) continue;
    ProtoMessage value;
    value.string_field(kValueTag, scalar.tag);
    value.float_field(kValueSimpleValue, static_cast<float>(scalar.value));
    summary.message_field(kSummaryValue, value);
  }
  if (summary.bytes().empty()) return;
  ProtoMessage event;
  event.double_field(kEventWallTime, wall_time);
  event.int64_field(kEventStep, step);
  event.message_field(kEventSummary, summary);
  write_record(event.bytes());
}

void TensorBoardWriter::write_record(const std::string& data) {
  const std::string length = little_endian_bytes(data.size(), 8);
  out_ << length << little_endian_bytes(masked_crc(length.data(), length.size()), 4) << data
       << little_endian_bytes(masked_crc(data.data(), data.size()), 4);
  out_.flush();
  if (!out_) throw std::runtime_error(cat("cannot write ", path_, write_failure_detail(errno, path_)));
}

}  // namespace topotrain
