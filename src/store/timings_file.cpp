#include "topotrain/store/timings_file.h"

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
       {"other", "tokens", "loss", "lr", "grad_norm", "peak_memory_bytes", "queue_depth", "collectives", "flops"})
    fields.push_back(field);
  fields.insert(fields.end(), extra_fields.begin(), extra_fields.end());
  return fields;
}

std::vector<std::string> span_fields() { return {"rank", "step", "phase", "start", "seconds", "gpu"}; }

std::vector<std::string> nvml_fields() {
  return {"rank", "time", "gpu_util", "mem_util", "mem_used_bytes", "power_watts", "sm_clock_mhz"};
}

std::vector<std::string> rank_fields() { return {"rank", "flops_per_token", "peak_flops", "nvml_device"}; }

TimingsData read_timings(const std::string& path) {
  auto lock = h5_serialize();
  h5_quiet();
  H5Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate(file access)");
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || H5_VERSION_GE(1, 12, 1)
  h5_check(H5Pset_file_locking(access, false, true), "H5Pset_file_locking");
#endif
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, access);
  if (id < 0) throw std::runtime_error(path + " cannot be opened as HDF5 (missing, truncated or not a timings file)");
  H5Handle file(id, H5Fclose, path);
  TimingsData data;
  data.path = path;
  try {
    if (!has_attribute(file, "format") || read_string_attribute(file, "format") != "topotrain-timings")
      throw std::runtime_error("not a topotrain timings file (no format = \"topotrain-timings\")");
    data.world_size = static_cast<int>(read_int_attribute(file, "world_size"));
    data.roles = split_commas(read_string_attribute(file, "roles"));
    if (static_cast<int>(data.roles.size()) != data.world_size)
      throw std::runtime_error(cat("roles lists ", data.roles.size(), " ranks, world_size is ", data.world_size));
    data.ranks = read_table(file, "ranks");
    data.steps = read_table(file, "steps");
    data.spans = read_table(file, "spans");
    data.nvml = read_table(file, "nvml");
    H5Handle spans(H5Dopen2(file, "spans", H5P_DEFAULT), H5Dclose, "spans");
    data.span_phases = split_commas(read_string_attribute(spans, "phases"));
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  return data;
}

}  // namespace topotrain
