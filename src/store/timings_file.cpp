#include "topotrain/store/timings_file.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/store/phase.h"

namespace topotrain {
namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  return parts;
}

}  // namespace

std::vector<std::string> step_fields(const std::vector<std::string>& extra_fields) {
  std::vector<std::string> fields = {"step", "rank", "start", "wall"};
  for (const char* phase : phase_names()) fields.push_back(phase);
  for (const char* field :
       {"other", "tokens", "loss", "lr", "grad_norm", "peak_memory_bytes", "queue_depth", "collectives", "flops",
        "overlap", "comm_overlap", "checkpoint_writing"})
    fields.push_back(field);
  fields.insert(fields.end(), extra_fields.begin(), extra_fields.end());
  return fields;
}

std::vector<std::string> span_fields() { return {"rank", "step", "phase", "start", "seconds", "gpu"}; }

std::vector<std::string> nvml_fields() {
  return {"rank", "time", "gpu_util", "mem_util", "mem_used_bytes", "power_watts", "sm_clock_mhz"};
}

std::vector<std::string> rank_fields() {
  return {"rank", "flops_per_token", "peak_flops", "nvml_device", "device_group"};
}

namespace {

const char* const kTables[] = {"ranks", "steps", "spans", "nvml"};

// Opens a timings file read-only without taking HDF5's file lock (a copy published while
// the job runs may be read by many at once; nothing writes it).
H5Handle open_without_lock(const std::string& path) {
  H5Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate(file access)");
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || H5_VERSION_GE(1, 12, 1)
  h5_check(H5Pset_file_locking(access, false, true), "H5Pset_file_locking");
#endif
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, access);
  if (id < 0) throw std::runtime_error(path + " cannot be opened as HDF5 (missing, truncated or not a timings file)");
  return H5Handle(id, H5Fclose, path);
}

hsize_t table_rows(hid_t location, const char* name) {
  H5Handle dataset(H5Dopen2(location, name, H5P_DEFAULT), H5Dclose, cat("no table ", name));
  H5Handle space(H5Dget_space(dataset), H5Sclose, cat("H5Dget_space ", name));
  hsize_t dims[2] = {0, 0};
  if (H5Sget_simple_extent_ndims(space) != 2 || H5Sget_simple_extent_dims(space, dims, nullptr) < 0)
    throw std::runtime_error(cat("table ", name, " is not 2-D"));
  return dims[0];
}

// One launch: the file's root or a group under /launches.
TimingsData read_launch(hid_t location, const std::string& path) {
  TimingsData data;
  data.path = path;
  if (!has_attribute(location, "format") || read_string_attribute(location, "format") != "topotrain-timings")
    throw std::runtime_error("not a topotrain timings file (no format = \"topotrain-timings\")");
  if (has_attribute(location, "launch")) data.launch = static_cast<int>(read_int_attribute(location, "launch"));
  if (has_attribute(location, "started_at")) data.started_at = read_real_attribute(location, "started_at");
  data.world_size = static_cast<int>(read_int_attribute(location, "world_size"));
  data.roles = split_commas(read_string_attribute(location, "roles"));
  if (static_cast<int>(data.roles.size()) != data.world_size)
    throw std::runtime_error(cat("roles lists ", data.roles.size(), " ranks, world_size is ", data.world_size));
  data.ranks = read_table(location, "ranks");
  data.steps = read_table(location, "steps");
  data.spans = read_table(location, "spans");
  data.nvml = read_table(location, "nvml");
  H5Handle spans(H5Dopen2(location, "spans", H5P_DEFAULT), H5Dclose, "spans");
  data.span_phases = split_commas(read_string_attribute(spans, "phases"));
  return data;
}

std::vector<std::string> folded_names(hid_t file) {
  if (!link_exists(file, kTimingsLaunchesGroup)) return {};
  H5Handle group(H5Gopen2(file, kTimingsLaunchesGroup, H5P_DEFAULT), H5Gclose, kTimingsLaunchesGroup);
  std::vector<std::string> names = child_names(group);
  // Numeric order (child_names sorts as text: "10" before "9").
  std::sort(names.begin(), names.end(),
            [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); });
  return names;
}

// The group /launches/<name> of `file`.
H5Handle open_folded(hid_t file, const std::string& name) {
  const std::string path = cat(kTimingsLaunchesGroup, "/", name);
  return H5Handle(H5Gopen2(file, path.c_str(), H5P_DEFAULT), H5Gclose, path);
}

// The number of the newest launch in `to`'s /launches group; 0 when it has none.
int last_folded_launch(hid_t to) {
  const std::vector<std::string> names = folded_names(to);
  return names.empty() ? 0 : static_cast<int>(std::stoll(names.back()));
}

std::vector<TimingsData> read_all(const std::string& path, bool earlier) {
  auto lock = h5_serialize();
  h5_quiet();
  H5Handle file = open_without_lock(path);
  std::vector<TimingsData> launches;
  try {
    if (earlier) {
      for (const std::string& name : folded_names(file)) {
        try {
          launches.push_back(read_launch(open_folded(file, name), path));
        } catch (const std::exception& e) {
          throw std::runtime_error(cat("/", kTimingsLaunchesGroup, "/", name, ": ", e.what()));
        }
      }
    }
    launches.push_back(read_launch(file, path));
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  return launches;
}

// Copies one launch (at `from`, a file root or a /launches group) into a new group `name` of
// `to`: its attributes and its tables, nothing below them.
void copy_launch(hid_t from, hid_t to, const std::string& name, int number) {
  H5Handle group(H5Gcreate2(to, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                 "cannot create " + name);
  write_attribute(group, "format", read_string_attribute(from, "format"));
  write_attribute(group, "launch", std::int64_t{number});
  for (const char* attribute : {"world_size", "gather_every"})
    write_attribute(group, attribute, read_int_attribute(from, attribute));
  write_attribute(group, "roles", read_string_attribute(from, "roles"));
  if (has_attribute(from, "started_at")) write_attribute(group, "started_at", read_real_attribute(from, "started_at"));
  for (const char* table : kTables)
    h5_check(H5Ocopy(from, table, group, table, H5P_DEFAULT, H5P_DEFAULT), cat("cannot copy table ", table));
}

}  // namespace

TimingsData read_timings(const std::string& path) { return std::move(read_all(path, false).back()); }

std::vector<TimingsData> read_timing_launches(const std::string& path) { return read_all(path, true); }

std::vector<RankRecord> rank_records(const TimingsData& launch) {
  std::vector<RankRecord> records(static_cast<std::size_t>(std::max(launch.world_size, 0)));
  const TableData& ranks = launch.ranks;
  const int c_rank = ranks.column("rank"), c_flops = ranks.column("flops_per_token"),
            c_peak = ranks.column("peak_flops"), c_group = ranks.column("device_group");
  for (std::size_t row = 0; c_rank >= 0 && row < ranks.rows; ++row) {
    const double rank = ranks.at(row, c_rank);
    if (!(rank >= 0 && rank < static_cast<double>(records.size()))) continue;
    RankRecord& record = records[static_cast<std::size_t>(rank)];
    if (c_flops >= 0) record.flops_per_token = ranks.at(row, c_flops);
    if (c_peak >= 0) record.peak_flops = ranks.at(row, c_peak);
    if (c_group >= 0) record.device_group = static_cast<int>(ranks.at(row, c_group));
  }
  return records;
}

int fold_launches(hid_t to, const std::string& from) {
  H5Handle source = open_without_lock(from);
  std::set<double> started;
  for (const std::string& name : folded_names(to)) {
    H5Handle group = open_folded(to, name);
    if (has_attribute(group, "started_at")) started.insert(read_real_attribute(group, "started_at"));
  }
  if (!link_exists(to, kTimingsLaunchesGroup))
    H5Handle(H5Gcreate2(to, kTimingsLaunchesGroup, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
             "cannot create /launches");
  H5Handle launches(H5Gopen2(to, kTimingsLaunchesGroup, H5P_DEFAULT), H5Gclose, kTimingsLaunchesGroup);
  int number = last_folded_launch(to);
  int highest = 0;
  auto fold = [&](hid_t launch) {
    // Files from before launches were numbered count as one launch after what came before.
    const int own = has_attribute(launch, "launch") ? static_cast<int>(read_int_attribute(launch, "launch")) : 0;
    highest = std::max({highest, own, number + 1});
    const bool recorded = table_rows(launch, "steps") > 0;
    const bool seen = has_attribute(launch, "started_at") && started.count(read_real_attribute(launch, "started_at"));
    if (!recorded || seen) return;
    number = std::max(own, number + 1);
    const std::string name = std::to_string(number);
    try {
      copy_launch(launch, launches, name, number);
    } catch (...) {
      H5Ldelete(launches, name.c_str(), H5P_DEFAULT);  // no half-copied launch stays behind
      throw;
    }
  };
  try {
    for (const std::string& name : folded_names(source)) fold(open_folded(source, name));
    fold(source);
  } catch (const std::exception& e) {
    throw std::runtime_error(from + ": " + e.what());
  }
  return highest;
}

}  // namespace topotrain
