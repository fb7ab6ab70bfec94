// The layout of <run_dir>/timings.h5, shared by the timing log (writer) and
// topotrain-report (reader). Every table is a 2-D float64 dataset [rows, fields] with a
// comma-separated `fields` attribute; readers look columns up by name, so columns can
// be added without breaking old readers.
//
//   / attributes     format = "topotrain-timings", world_size, roles ("target,target,drafter":
//                    rank i's role is the i-th), gather_every, launch (1 for a run's first
//                    launch, +1 per resume), started_at (Unix time the launch began)
//   /ranks           rank, flops_per_token, peak_flops, nvml_device, device_group (one
//                    row per rank; 0 = unknown; device_group: the lowest rank on the
//                    rank's GPU, -1 for a CPU rank; absent in older files)
//   /steps           step, rank, start, wall, <one column per Phase, seconds>, other,
//                    tokens, loss, lr, grad_norm, peak_memory_bytes, queue_depth,
//                    collectives, flops, overlap, comm_overlap, checkpoint_writing,
//                    <extra fields>    (one row per rank and step; flops: the step's model
//                    FLOPs where they vary per step, else NaN; overlap, comm_overlap:
//                    StepRecord's overlap_seconds and comm_overlap_seconds;
//                    checkpoint_writing: StepMetrics', NaN where not known; the last three
//                    absent in older files)
//   /spans           rank, step, phase, start, seconds, gpu   (every timed scope; `phase`
//                    is the index into the `phases` attribute of /spans; gpu = 1 for
//                    device time of a CUDA stream)
//   /nvml            rank, time, gpu_util, mem_util, mem_used_bytes, power_watts, sm_clock_mhz
//   /launches/<n>    the run's earlier launches (a resumed run), n = their launch numbers,
//                    oldest first: each a group with the root's attributes and its four
//                    tables as that launch wrote them (its ranks, its own time epoch). The
//                    root is always the newest launch, so a reader of one launch needs no
//                    change; a launch that recorded no step is not kept.
//
// A running job writes timings.h5.live and publishes copies of it as timings.h5 (by
// rename, so a reader always finds a whole file; timing_log.h says when); when the log
// closes, the live file itself becomes timings.h5. A job that was killed may leave a
// timings.h5.live a few gathers ahead of timings.h5 (a resumed run picks it up). Older
// versions kept each earlier launch beside it as timings.N.h5; a resumed run folds those
// into /launches and removes them.
//
// Times are seconds; `start` and `time` count from one epoch taken on all ranks right
// after a barrier, so lanes of different ranks line up. Rows arrive in gather order, not
// sorted.
#pragma once

#include <string>
#include <vector>

#include "topotrain/store/h5_io.h"
#include "topotrain/store/run_dir_files.h"

namespace topotrain {

constexpr const char* kTimingsLaunchesGroup = "launches";
constexpr const char* kTimingsLiveSuffix = ".live";  // the file being written: timings.h5.live

std::vector<std::string> step_fields(const std::vector<std::string>& extra_fields);
std::vector<std::string> span_fields();
std::vector<std::string> nvml_fields();
std::vector<std::string> rank_fields();

struct TimingsData {
  std::string path;
  int launch = 1;         // files from before launches were numbered: 1
  double started_at = 0;  // Unix seconds; 0 = not recorded
  int world_size = 0;
  std::vector<std::string> roles;  // per rank
  TableData ranks;
  TableData steps;
  TableData spans;
  TableData nvml;
  std::vector<std::string> span_phases;  // names of /spans' phase indices
};

// Reads a whole timings file, without taking HDF5's file lock (a copy published while the
// job runs may be read by many at once; nothing writes it); throws std::runtime_error naming the file when it is not one.
TimingsData read_timings(const std::string& path);
// Every launch in the file, oldest first; the last is what read_timings returns.
std::vector<TimingsData> read_timing_launches(const std::string& path);

// A launch's /ranks row of one rank, by name: 0 (unknown) where the file lacks a column, and
// device_group -1 (not a GPU rank).
struct RankRecord {
  double flops_per_token = 0;
  double peak_flops = 0;
  int device_group = -1;
};
// Indexed by rank, world_size entries; a rank without a row keeps the defaults.
std::vector<RankRecord> rank_records(const TimingsData& launch);

// Writer side. Copies every launch of the timings file at `from` that recorded a step into
// `to`'s /launches group, under its own launch number (one after the last already there
// when it has none, or when it is not higher), and returns the highest launch number
// `from` held, recorded or not (a launch that died before its first step still counts).
// A launch whose started_at equals one already in `to` is skipped, so folding a file
// twice (a start-up killed half-way) adds nothing. The caller holds h5_serialize().
int fold_launches(hid_t to, const std::string& from);

}  // namespace topotrain
