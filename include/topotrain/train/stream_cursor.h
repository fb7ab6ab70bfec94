// The stream cursor of dflash_train: how targets, drafters and checkpoints keep track of
// where each target's sample stream stands, so that across stops, resumes and failures no
// sample is lost or repeated.
//
// Invariants (together they make "nothing lost, nothing repeated" true):
// 1. Stream k (data::SampleStream k of n) is read by the k-th target rank only
//    (stream_of), and only from the position its drafter sends it at each start
//    (send_stream_starts / receive_stream_start): at the run's start the checkpoint's
//    position of that stream or the run's initial one; at a restart (train.oom =
//    "shrink": every stream restarts with half the token budget) the position as of the
//    last completed step. Targets never read checkpoints.
// 2. Every batch a target sends carries its cursor: its stream and the stream's position
//    after it (encode_cursor / decode_cursor). A stream's batches reach its one drafter in
//    the order they were sent.
// 3. A drafter moves a stream's position to a batch's cursor only when the step that took
//    the batch completes (trained, or skipped as not finite and counted). Batches taken or
//    in flight when the drafters stop are discarded and leave the position where it was.
// 4. A checkpoint holds every stream's position, each from the one drafter fed by that
//    stream (gather_stream_positions), as of the step it saves.
// So a resumed or restarted target starts right after the last batch a step took: what
// was in flight is recomputed, nothing taken is sent again. A position counts samples and tokens of a
// sample, not batches, so this holds also with another train.token_budget.
// 5. A batch's anchors are drawn from a generator seeded by the run seed and its cursor
//    (anchor_seed), so the same batch gets the same anchors after a resume, on any drafter.
#pragma once

#include <mpi.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "topotrain/core/topology.h"
#include "topotrain/data/data_position.h"
#include "topotrain/data/token_budget_packer.h"

namespace topotrain {

std::size_t target_count(const Topology& topology);
// The k-th target rank reads stream k.
data::SampleStream stream_of(const Topology& topology, int target_rank);

// A batch's cursor: its stream, and where that stream stands after the batch.
struct StreamCursor {
  std::uint64_t stream = 0;
  data::DataPosition after;
};

// What travels in comm::PackedHiddenBatch::cursor.
at::Tensor encode_cursor(const StreamCursor& cursor);
// Throws std::runtime_error when `cursor` is not one encode_cursor made.
StreamCursor decode_cursor(const at::Tensor& cursor);

std::uint64_t anchor_seed(std::uint64_t seed, const StreamCursor& cursor);
// The anchors of held-out batch `batch` (in the order its target sends them) of the
// target reading stream `stream`: the same at every held-out pass, and none a training
// batch draws.
std::uint64_t held_out_anchor_seed(std::uint64_t seed, std::uint64_t stream, std::uint64_t batch);

// Where a target's stream starts, and the token budget it packs its batches with; or, when
// `held_out`, a held-out pass packed with that budget (the position is unused).
struct StreamStart {
  data::DataPosition position;
  std::int64_t token_budget = 0;
  bool held_out = false;
};

// On a drafter, before each link it builds to its targets: each target learns where its
// stream starts, streams[stream_of(target)], and the budget.
void send_stream_starts(const Topology& topology, int drafter_rank, const std::vector<data::DataPosition>& streams,
                        std::int64_t token_budget);
// On a drafter between two links: each target sends its share of the held-out documents.
void send_held_out_starts(const Topology& topology, int drafter_rank, std::int64_t token_budget);
// On a drafter whose links are closed for good: its targets start no more streams.
void send_stream_end(const Topology& topology, int drafter_rank);
// On a target, before each link it builds and after each one closed: where its stream
// starts next (or that a held-out pass comes first), or nullopt when the run's streams are
// over.
std::optional<StreamStart> receive_stream_start(const Topology& topology, int target_rank);

// Collective over `drafters` (the drafters' role communicator): `streams` with every
// stream's position taken from the drafter that feeds on it (`mine`: this drafter's streams).
std::vector<data::DataPosition> gather_stream_positions(const std::vector<data::DataPosition>& streams,
                                                        const std::vector<std::uint64_t>& mine, MPI_Comm drafters);

}  // namespace topotrain
