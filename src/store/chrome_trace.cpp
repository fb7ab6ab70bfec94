#include "topotrain/store/chrome_trace.h"

#include <nlohmann/json.hpp>

#include <cmath>

#include "topotrain/core/error.h"

namespace topotrain {
namespace {

using Json = nlohmann::ordered_json;  // fields in the order written: ph, pid, tid, name, ...

// Microseconds to the nanosecond, as the trace format counts them; JSON has no NaN: null.
Json micros(double seconds) {
  const double us = seconds * 1e6;
  return std::isfinite(us) ? Json(std::round(us * 1e3) / 1e3) : Json();
}

Json number(double value) { return std::isfinite(value) ? Json(value) : Json(); }

constexpr int kGpuLaneOffset = 100000;  // tid of rank r's GPU lane: r + offset

}  // namespace

std::string chrome_trace_json(const TimingsData& data) {
  // Each event is one JSON object made by nlohmann-json; they are joined one per line into
  // the document rather than held as one tree, which for a long run's millions of spans would
  // take several times the memory of the text.
  std::string out = R"({"displayTimeUnit":"ms","traceEvents":[)";
  out += '\n';
  bool first = true;
  auto event = [&](const Json& body) {
    if (!first) out += ",\n";
    // A name that is not UTF-8 (a role read from a damaged file) gets U+FFFD, not invalid JSON.
    out += body.dump(-1, ' ', false, Json::error_handler_t::replace);
    first = false;
  };
  auto lane = [&](int tid, const std::string& name, int sort_index) {
    event(Json{{"ph", "M"}, {"pid", 0}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", name}}}});
    event(Json{{"ph", "M"}, {"pid", 0}, {"tid", tid}, {"name", "thread_sort_index"},
               {"args", {{"sort_index", sort_index}}}});
  };
  event(Json{{"ph", "M"}, {"pid", 0}, {"name", "process_name"}, {"args", {{"name", "topotrain"}}}});
  for (int rank = 0; rank < data.world_size; ++rank) {
    const std::string& role = data.roles[static_cast<std::size_t>(rank)];
    lane(rank, cat("rank ", rank, " ", role), rank * 2);
    lane(rank + kGpuLaneOffset, cat("rank ", rank, " ", role, " (GPU)"), rank * 2 + 1);
  }
  const TableData& steps = data.steps;
  const int c_step = steps.column("step"), c_rank = steps.column("rank"), c_start = steps.column("start"),
            c_wall = steps.column("wall"), c_tokens = steps.column("tokens"), c_loss = steps.column("loss");
  for (std::size_t row = 0; row < steps.rows; ++row)
    event(Json{{"ph", "X"},
               {"pid", 0},
               {"tid", static_cast<int>(steps.at(row, c_rank))},
               {"name", cat("step ", static_cast<long long>(steps.at(row, c_step)))},
               {"cat", "step"},
               {"ts", micros(steps.at(row, c_start))},
               {"dur", micros(steps.at(row, c_wall))},
               {"args", {{"tokens", number(steps.at(row, c_tokens))}, {"loss", number(steps.at(row, c_loss))}}}});
  const TableData& spans = data.spans;
  const int s_rank = spans.column("rank"), s_step = spans.column("step"), s_phase = spans.column("phase"),
            s_start = spans.column("start"), s_seconds = spans.column("seconds"), s_gpu = spans.column("gpu");
  for (std::size_t row = 0; row < spans.rows; ++row) {
    const auto phase = static_cast<std::size_t>(spans.at(row, s_phase));
    const std::string name = phase < data.span_phases.size() ? data.span_phases[phase] : cat("phase ", phase);
    const bool gpu = s_gpu >= 0 && spans.at(row, s_gpu) != 0;
    event(Json{{"ph", "X"},
               {"pid", 0},
               {"tid", static_cast<int>(spans.at(row, s_rank)) + (gpu ? kGpuLaneOffset : 0)},
               {"name", name},
               {"cat", "phase"},
               {"ts", micros(spans.at(row, s_start))},
               {"dur", micros(spans.at(row, s_seconds))},
               {"args", {{"step", static_cast<long long>(spans.at(row, s_step))}}}});
  }
  const TableData& nvml = data.nvml;
  for (std::size_t row = 0; row < nvml.rows; ++row) {
    Json args = Json::object();
    for (const char* field : {"gpu_util", "mem_util", "power_watts", "sm_clock_mhz"})
      args[field] = number(nvml.at(row, nvml.column(field)));
    event(Json{{"ph", "C"},
               {"pid", 0},
               {"name", cat("rank ", static_cast<int>(nvml.at(row, 0)), " GPU")},
               {"ts", micros(nvml.at(row, nvml.column("time")))},
               {"args", std::move(args)}});
  }
  out += "\n]}\n";
  return out;
}

}  // namespace topotrain
