#include "topotrain/train/stream_cursor.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

#include "topotrain/comm/link_start.h"
#include "topotrain/comm/watchdog.h"

namespace topotrain {
namespace {

constexpr int kPositionWords = 4;

std::vector<std::uint64_t> words_of(const data::DataPosition& p) {
  return {p.seed, p.epoch, p.consumed_samples, p.offset_in_sample};
}

data::DataPosition position_of(const std::uint64_t* w) { return {w[0], w[1], w[2], w[3]}; }

}  // namespace

std::size_t target_count(const Topology& topology) { return topology.find_role("target")->ranks.size(); }

data::SampleStream stream_of(const Topology& topology, int target_rank) {
  int index = 0;
  topology.role_of(target_rank, &index);
  return {static_cast<std::uint64_t>(index), target_count(topology)};
}

at::Tensor encode_cursor(const StreamCursor& c) {
  return at::tensor({static_cast<std::int64_t>(c.stream), static_cast<std::int64_t>(c.after.seed),
                     static_cast<std::int64_t>(c.after.epoch), static_cast<std::int64_t>(c.after.consumed_samples),
                     static_cast<std::int64_t>(c.after.offset_in_sample)},
                    at::kLong);
}

StreamCursor decode_cursor(const at::Tensor& cursor) {
  if (!cursor.defined() || cursor.numel() != 1 + kPositionWords)
    throw std::runtime_error("dflash_train: a hidden-state batch arrived without its stream cursor");
  auto v = cursor.accessor<std::int64_t, 1>();
  StreamCursor c;
  c.stream = static_cast<std::uint64_t>(v[0]);
  c.after = {static_cast<std::uint64_t>(v[1]), static_cast<std::uint64_t>(v[2]), static_cast<std::uint64_t>(v[3]),
             static_cast<std::uint64_t>(v[4])};
  return c;
}

std::uint64_t anchor_seed(std::uint64_t seed, const StreamCursor& c) {
  std::uint64_t h = seed ^ 0x9E3779B97F4A7C15ULL;
  for (std::uint64_t v : {c.stream, c.after.epoch, c.after.consumed_samples, c.after.offset_in_sample}) {
    h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ULL;
  }
  return h;
}

std::uint64_t held_out_anchor_seed(std::uint64_t seed, std::uint64_t stream, std::uint64_t batch) {
  // No training cursor has epoch ~0: the held-out draws are not a training batch's.
  return anchor_seed(seed, {stream, {0, ~std::uint64_t{0}, batch, 0}});
}

namespace {

// A start message: [what starts (StartKind), token budget, the position's words].
enum StartKind : std::uint64_t { kEnd = 0, kStream = 1, kHeldOut = 2 };
constexpr int kStartWords = 2 + kPositionWords;

void send_starts(const Topology& topology, int drafter_rank, StartKind kind,
                 const std::vector<data::DataPosition>* streams, std::int64_t token_budget) {
  const comm::LinkEnds ends{drafter_rank, topology.targets_of(drafter_rank)};
  std::vector<std::vector<std::uint64_t>> per_target;
  for (int t : ends.senders) {
    std::vector<std::uint64_t> words{kind, static_cast<std::uint64_t>(token_budget)};
    const std::vector<std::uint64_t> position =
        streams ? words_of((*streams)[stream_of(topology, t).index]) : std::vector<std::uint64_t>(kPositionWords, 0);
    words.insert(words.end(), position.begin(), position.end());
    per_target.push_back(std::move(words));
  }
  comm::send_link_start(MPI_COMM_WORLD, ends, per_target);
}

}  // namespace

void send_stream_starts(const Topology& topology, int drafter_rank, const std::vector<data::DataPosition>& streams,
                        std::int64_t token_budget) {
  send_starts(topology, drafter_rank, kStream, &streams, token_budget);
}

void send_held_out_starts(const Topology& topology, int drafter_rank, std::int64_t token_budget) {
  send_starts(topology, drafter_rank, kHeldOut, nullptr, token_budget);
}

void send_stream_end(const Topology& topology, int drafter_rank) {
  send_starts(topology, drafter_rank, kEnd, nullptr, 0);
}

std::optional<StreamStart> receive_stream_start(const Topology& topology, int target_rank) {
  const int drafter = topology.drafter_of(target_rank);
  const std::vector<std::uint64_t> words =
      comm::receive_link_start(MPI_COMM_WORLD, {drafter, topology.targets_of(drafter)}, kStartWords);
  if (words[0] == kEnd) return std::nullopt;
  return StreamStart{position_of(&words[2]), static_cast<std::int64_t>(words[1]), words[0] == kHeldOut};
}

std::vector<data::DataPosition> gather_stream_positions(const std::vector<data::DataPosition>& streams,
                                                        const std::vector<std::uint64_t>& mine, MPI_Comm drafters) {
  // A stream's words are zero on every drafter but the one it feeds: the sum is that one's.
  std::vector<std::uint64_t> flat(kPositionWords * streams.size(), 0);
  for (std::uint64_t s : mine) {
    const std::vector<std::uint64_t> words = words_of(streams[s]);
    std::copy(words.begin(), words.end(), flat.begin() + static_cast<std::ptrdiff_t>(kPositionWords * s));
  }
  comm::all_reduce_in_place(flat.data(), static_cast<int>(flat.size()), MPI_UINT64_T, MPI_SUM, drafters,
                            "MPI_Iallreduce (stream positions)");
  std::vector<data::DataPosition> all;
  for (std::size_t s = 0; s < streams.size(); ++s) all.push_back(position_of(&flat[kPositionWords * s]));
  return all;
}

}  // namespace topotrain
