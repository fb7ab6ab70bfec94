#include "topotrain/train/metrics_log.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "topotrain/core/files.h"
#include "topotrain/model/dflash_metrics.h"

namespace topotrain {

const std::vector<std::string> kMetricsKeys = {
    "step",        "time",         "launch",        "tokens",      "tokens_total", "loss",
    "lr",          "grad_norm",    "step_seconds",  "tokens_per_s", "memory_bytes", "collectives",
    "skipped",     "mfu",          "aux_loss",      "starved_seconds", "tau",      "draft_accuracy",
    "eval_loss"};

namespace {

// JSON has no NaN or infinity: such a value is null.
nlohmann::json number(double value) { return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(); }

// The launch of the last line in an existing file, 0 when there is none. Only the file's
// end is read: a long run's file holds a line per step, and its last one is short.
int last_launch(const std::string& path) {
  constexpr std::streamoff kTail = 1 << 16;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return 0;
  const std::streamoff size = in.tellg();
  in.seekg(size > kTail ? size - kTail : 0);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  if (last.empty()) return 0;
  const nlohmann::json object = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  return object.is_object() && object.contains("launch") && object["launch"].is_number_integer()
             ? object["launch"].get<int>()
             : 0;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& run_dir, ProgressConfig config)
    : path_(join_path(run_dir, kMetricsFileName)), config_(config), launch_(last_launch(path_) + 1) {
  out_.open(path_, std::ios::app);
  if (!out_) throw std::runtime_error("cannot open " + path_ + " for writing");
}

void MetricsLog::record(const StepReport& report, std::int64_t tokens_total, bool skipped) {
  nlohmann::json line;
  line["step"] = report.step;
  line["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  line["launch"] = launch_;
  line["tokens"] = report.tokens;
  line["tokens_total"] = tokens_total;
  line["loss"] = number(report.loss);
  line["lr"] = report.lr;
  line["grad_norm"] = number(report.grad_norm);
  line["step_seconds"] = report.seconds;
  line["tokens_per_s"] = report.seconds > 0 ? static_cast<double>(report.tokens) / report.seconds : 0.0;
  line["memory_bytes"] = config_.memory_bytes(report);
  line["collectives"] = report.collectives;
  line["skipped"] = skipped;
  if (const std::optional<double> mfu = config_.mfu(config_.flops_of(report), report.seconds)) line["mfu"] = *mfu;
  if (report.aux_loss) line["aux_loss"] = number(*report.aux_loss);
  if (report.starved_seconds) line["starved_seconds"] = *report.starved_seconds;
  if (report.eval_loss) line["eval_loss"] = number(*report.eval_loss);
  if (!report.slot_valid.empty()) {
    const std::vector<double> accuracy = model::slot_accuracy(report.slot_correct, report.slot_valid);
    line["tau"] = model::acceptance_length(accuracy);
    line["draft_accuracy"] = accuracy;
  }
  out_ << line.dump() << '\n';
  out_.flush();
  if (!out_) throw std::runtime_error("cannot write " + path_);
}

}  // namespace topotrain
