#include "topotrain/store/chrome_trace.h"

#include <cmath>
#include <cstdio>

#include "topotrain/core/error.h"

namespace topotrain {
namespace {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string number(double value) {
  if (!std::isfinite(value)) return "null";
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", value);
  return text;
}

constexpr int kGpuLaneOffset = 100000;  // tid of rank r's GPU lane: r + offset

}  // namespace

std::string chrome_trace_json(const TimingsData& data) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto event = [&](const std::string& body) {
    out += first ? "" : ",\n";
    out += "{" + body + "}";
    first = false;
  };
  event("\"ph\":\"M\",\"pid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"topotrain\"}");
  for (int rank = 0; rank < data.world_size; ++rank) {
    const std::string role = data.roles[static_cast<std::size_t>(rank)];
    event(cat("\"ph\":\"M\",\"pid\":0,\"tid\":", rank, ",\"name\":\"thread_name\",\"args\":{\"name\":",
              json_string(cat("rank ", rank, " ", role)), "}"));
    event(cat("\"ph\":\"M\",\"pid\":0,\"tid\":", rank, ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":",
              rank * 2, "}"));
    event(cat("\"ph\":\"M\",\"pid\":0,\"tid\":", rank + kGpuLaneOffset,
              ",\"name\":\"thread_name\",\"args\":{\"name\":", json_string(cat("rank ", rank, " ", role, " (GPU)")), "}"));
    event(cat("\"ph\":\"M\",\"pid\":0,\"tid\":", rank + kGpuLaneOffset,
              ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":", rank * 2 + 1, "}"));
  }
  const TableData& steps = data.steps;
  const int c_step = steps.column("step"), c_rank = steps.column("rank"), c_start = steps.column("start"),
            c_wall = steps.column("wall"), c_tokens = steps.column("tokens"), c_loss = steps.column("loss");
  for (std::size_t row = 0; row < steps.rows; ++row)
    event(cat("\"ph\":\"X\",\"pid\":0,\"tid\":", static_cast<int>(steps.at(row, c_rank)), ",\"name\":",
              json_string(cat("step ", static_cast<long long>(steps.at(row, c_step)))), ",\"cat\":\"step\",\"ts\":",
              number(steps.at(row, c_start) * 1e6), ",\"dur\":", number(steps.at(row, c_wall) * 1e6),
              ",\"args\":{\"tokens\":", number(steps.at(row, c_tokens)), ",\"loss\":", number(steps.at(row, c_loss)),
              "}"));
  const TableData& spans = data.spans;
  const int s_rank = spans.column("rank"), s_step = spans.column("step"), s_phase = spans.column("phase"),
            s_start = spans.column("start"), s_seconds = spans.column("seconds"), s_gpu = spans.column("gpu");
  for (std::size_t row = 0; row < spans.rows; ++row) {
    const auto phase = static_cast<std::size_t>(spans.at(row, s_phase));
    const std::string name = phase < data.span_phases.size() ? data.span_phases[phase] : cat("phase ", phase);
    const bool gpu = s_gpu >= 0 && spans.at(row, s_gpu) != 0;
    event(cat("\"ph\":\"X\",\"pid\":0,\"tid\":", static_cast<int>(spans.at(row, s_rank)) + (gpu ? kGpuLaneOffset : 0),
              ",\"name\":", json_string(name), ",\"cat\":\"phase\",\"ts\":", number(spans.at(row, s_start) * 1e6),
              ",\"dur\":", number(spans.at(row, s_seconds) * 1e6), ",\"args\":{\"step\":",
              static_cast<long long>(spans.at(row, s_step)), "}"));
  }
  const TableData& nvml = data.nvml;
  for (std::size_t row = 0; row < nvml.rows; ++row) {
    std::string args;
    for (const char* field : {"gpu_util", "mem_util", "power_watts", "sm_clock_mhz"})
      args += cat(args.empty() ? "" : ",", json_string(field), ":", number(nvml.at(row, nvml.column(field))));
    event(cat("\"ph\":\"C\",\"pid\":0,\"name\":", json_string(cat("rank ", static_cast<int>(nvml.at(row, 0)), " GPU")),
              ",\"ts\":", number(nvml.at(row, nvml.column("time")) * 1e6), ",\"args\":{", args, "}"));
  }
  out += "\n]}\n";
  return out;
}

}  // namespace topotrain
