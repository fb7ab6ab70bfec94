// TensorBoard event files against an independent reader (tests/read_tfevents.py: pure
// Python CRC-32C and protobuf decoding), and CRC-32C against RFC 3720's test vectors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "topotrain/core/files.h"
#include "topotrain/core/crc32c.h"
#include "topotrain/store/tensorboard_events.h"
#include "../tfevents_reader.h"

using namespace topotrain;

using test_support::files_in;
using test_support::read_tfevents;

TEST(Crc32c, Rfc3720Vectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::vector<unsigned char> ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<unsigned char>(i);
    descending[i] = static_cast<unsigned char>(31 - i);
  }
  EXPECT_EQ(crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending.data(), descending.size()), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  // Piece by piece, as a writer checksums a stream: the same as at once, whatever the cut.
  for (std::size_t cut = 0; cut <= 9; ++cut)
    EXPECT_EQ(crc32c("123456789" + cut, 9 - cut, crc32c("123456789", cut)), 0xE3069283u) << cut;
}

// file_version first, then one event per call with its step, wall time and scalars (float
// precision; negative and large steps too); non-finite values are left out, and a call
// with none finite writes no event. Each call is flushed: read while the writer is open.
// The word-at-a-time path (SSE 4.2 where the CPU has it) against the definition, bit by
// bit, for every length up to a few words and every alignment of the start.
TEST(Crc32c, AnyLengthAndAlignmentMatchesTheBitwiseDefinition) {
  auto bitwise = [](const unsigned char* bytes, std::size_t size) {
    std::uint32_t crc = 0xFFFFFFFFu;
    for (std::size_t i = 0; i < size; ++i) {
      crc ^= bytes[i];
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
    }
    return crc ^ 0xFFFFFFFFu;
  };
  std::vector<unsigned char> buffer(64);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<unsigned char>(i * 37 + 11);
  for (std::size_t start = 0; start < 8; ++start)
    for (std::size_t size = 0; start + size <= buffer.size(); ++size)
      ASSERT_EQ(crc32c(buffer.data() + start, size), bitwise(buffer.data() + start, size)) << start << " " << size;
}

TEST(TensorBoardWriter, EventsReadBackByAnIndependentReader) {
  const std::string dir = join_path(make_temp_directory("topotrain-tensorboard-"), "tensorboard");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  {
    TensorBoardWriter writer(dir);  // makes the directory
    EXPECT_EQ(file_name(writer.path()).rfind("events.out.tfevents.", 0), 0u) << writer.path();
    writer.add_scalars(1, 1700000000.25, {{"train/loss", 3.25}, {"perf/mfu", 0.1}, {"train/grad_norm", nan}});
    writer.add_scalars(2, 1700000001.5, {{"train/loss", nan}});
    writer.add_scalars(std::int64_t{1} << 40, 1700000002.0,
                       {{"train/loss", 1e-7}, {"train/lr", -2.5}, {"inf", std::numeric_limits<double>::infinity()}});
    writer.add_scalars(-3, 1700000003.0, {{"x", 1}});
    const auto files = read_tfevents({writer.path()});
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(files[0]["file_version"], "brain.Event:2");
    const auto& events = files[0]["events"];
    ASSERT_EQ(events.size(), 3u);
    EXPECT_EQ(events[0]["step"], 1);
    EXPECT_DOUBLE_EQ(events[0]["wall_time"].get<double>(), 1700000000.25);
    EXPECT_EQ(events[0]["values"].size(), 2u);
    EXPECT_EQ(events[0]["values"]["train/loss"].get<double>(), 3.25);
    EXPECT_EQ(events[0]["values"]["perf/mfu"].get<double>(), static_cast<double>(0.1f));
    EXPECT_EQ(events[1]["step"], std::int64_t{1} << 40);
    EXPECT_EQ(events[1]["values"].size(), 2u);
    EXPECT_EQ(events[1]["values"]["train/loss"].get<double>(), static_cast<double>(1e-7f));
    EXPECT_EQ(events[1]["values"]["train/lr"].get<double>(), -2.5);
    EXPECT_EQ(events[2]["step"], -3);
  }
  remove_tree(parent_directory(dir));
}

// Every writer starts a file of its own in the directory (a resumed run's launches), also
// two in the same second of the same process.
TEST(TensorBoardWriter, EachWriterAddsAFile) {
  const std::string dir = make_temp_directory("topotrain-tensorboard-");
  {
    TensorBoardWriter first(dir);
    first.add_scalars(1, 1.0, {{"train/loss", 2}});
    TensorBoardWriter second(dir);
    second.add_scalars(2, 2.0, {{"train/loss", 1}});
    EXPECT_NE(first.path(), second.path());
  }
  const auto files = read_tfevents(files_in(dir));
  ASSERT_EQ(files.size(), 2u);
  std::vector<std::int64_t> steps;
  for (const auto& file : files) {
    ASSERT_EQ(file["events"].size(), 1u);
    steps.push_back(file["events"][0]["step"].get<std::int64_t>());
  }
  std::sort(steps.begin(), steps.end());
  EXPECT_EQ(steps, (std::vector<std::int64_t>{1, 2}));
  remove_tree(dir);
}

TEST(TensorBoardWriter, UnwritableDirectoryIsNamed) {
  const std::string dir = make_temp_directory("topotrain-tensorboard-");
  const std::string file = join_path(dir, "plain-file");
  { std::ofstream(file) << "x"; }
  try {
    TensorBoardWriter writer(join_path(file, "tensorboard"));
    FAIL() << "a directory under a plain file was created";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("plain-file"), std::string::npos) << e.what();
  }
  remove_tree(dir);
}
