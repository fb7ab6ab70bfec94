#include "topotrain/train/metrics_log.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/io_failure.h"

namespace topotrain {

const std::vector<std::string> kMetricsKeys = {
    "step",        "time",         "launch",        "tokens",      "tokens_total", "loss",
    "lr",          "grad_norm",    "step_seconds",  "tokens_per_s", "memory_bytes", "collectives",
    "skipped",     "mfu",          "aux_loss",      "peak_expert_load", "starved_seconds", "tau",
    "draft_accuracy", "tau_mode",  "tau_slot_mode", "eval_loss", "eval_tau", "eval_draft_accuracy",
    "eval_tau_mode", "eval_tau_slot_mode", "eval_decoded_tau", "eval_decoded_trivial_tau"};

namespace {

// JSON has no NaN or infinity: such a value is null.
nlohmann::json number(double value) { return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(); }

}  // namespace

MetricsLog::MetricsLog(const std::string& run_dir, int launch)
    : path_(join_path(run_dir, kMetricsFileName)), launch_(launch) {
  out_.open(path_, std::ios::app);
  if (!out_) throw std::runtime_error(cat("cannot open ", path_, " for writing", write_failure_detail(errno, path_)));
}

void MetricsLog::record(std::int64_t step, double time, const std::vector<StepValue>& values) {
  nlohmann::json line;
  line["step"] = step;
  line["time"] = time;
  line["launch"] = launch_;
  for (const StepValue& value : values)
    std::visit(
        [&](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>) line[value.name] = number(v);
          else line[value.name] = v;
        },
        value.value);
  out_ << line.dump() << '\n';
  out_.flush();
  if (!out_) throw std::runtime_error(cat("cannot write ", path_, write_failure_detail(errno, path_)));
}

}  // namespace topotrain
