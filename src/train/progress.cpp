#include "topotrain/train/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/core/process_memory.h"

namespace topotrain {
double ProgressConfig::flops_of(const StepReport& report) const {
  return report.flops > 0 ? report.flops : static_cast<double>(report.tokens) * flops_per_token;
}

std::optional<double> ProgressConfig::mfu(double flops, double seconds) const {
  if (!(peak_flops > 0 && flops > 0 && seconds > 0)) return std::nullopt;
  return flops / seconds / (peak_flops * ranks);
}

std::int64_t ProgressConfig::memory_bytes(const StepReport& report) const {
  return cpu ? resident_set_bytes() : report.peak_memory;
}

ProgressMeter::ProgressMeter(ProgressConfig config) : config_(config) {}

void ProgressMeter::record(const StepReport& report, std::int64_t tokens_done) {
  last_ = report;
  tokens_done_ = tokens_done;
  ++window_steps_;
  window_tokens_ += report.tokens;
  window_seconds_ += report.seconds;
  window_comm_ += report.comm_seconds.value_or(0);
  window_flops_ += config_.flops_of(report);
  window_starved_ += report.starved_seconds.value_or(0);
  window_loss_ += report.loss * report.loss_weight;
  window_weight_ += report.loss_weight;
  window_aux_ += report.aux_loss.value_or(0);
  window_load_ += report.peak_expert_load.value_or(0);
  window_draft_.add(report.draft);
}

std::string ProgressMeter::line() {
  const double seconds = window_seconds_;
  const double rate = seconds > 0 ? static_cast<double>(window_tokens_) / seconds : 0.0;
  const double steps = static_cast<double>(std::max<std::int64_t>(window_steps_, 1));
  char buffer[256];
  auto add = [&](std::string& out, int n) {
    out.append(buffer, std::min(static_cast<std::size_t>(std::max(n, 0)), sizeof buffer - 1));
  };
  std::string out;
  add(out, std::snprintf(buffer, sizeof buffer, "step %lld | loss %.4f", static_cast<long long>(last_.step),
                         window_weight_ > 0 ? window_loss_ / window_weight_ : 0.0));
  if (last_.aux_loss) add(out, std::snprintf(buffer, sizeof buffer, " aux %.4f", window_aux_ / steps));
  if (last_.peak_expert_load) add(out, std::snprintf(buffer, sizeof buffer, " load %.2f", window_load_ / steps));
  if (!window_draft_.empty()) out += " | " + window_draft_.summary();
  add(out, std::snprintf(buffer, sizeof buffer, " | lr %.2e | gnorm %.3g | ", last_.lr, last_.grad_norm));
  out += cat(format_rate(rate), " (", format_rate(rate / config_.ranks), " per ", config_.cpu ? "rank" : "GPU", ")");
  if (const std::optional<double> mfu = config_.mfu(window_flops_, seconds))
    add(out, std::snprintf(buffer, sizeof buffer, " | MFU %.1f%%", 100.0 * *mfu));
  if (last_.comm_seconds)
    add(out, std::snprintf(buffer, sizeof buffer, " | comm %.0f%%", seconds > 0 ? 100.0 * window_comm_ / seconds : 0.0));
  if (last_.starved_seconds)
    add(out, std::snprintf(buffer, sizeof buffer, " | starved %.0f%%",
                           seconds > 0 ? 100.0 * window_starved_ / seconds : 0.0));
  const double memory = static_cast<double>(config_.memory_bytes(last_));
  add(out, std::snprintf(buffer, sizeof buffer, " | %lld coll | %s %.2f GiB", static_cast<long long>(last_.collectives),
                         config_.cpu ? "rss" : "mem", memory / (1 << 30)));
  // Whichever limit the run reaches first, at the window's pace.
  double left = -1;
  if (config_.planned_tokens > 0 && rate > 0)
    left = static_cast<double>(config_.planned_tokens - tokens_done_) / rate;
  if (config_.max_steps > 0 && seconds > 0) {
    const double by_steps = static_cast<double>(config_.max_steps - last_.step) * seconds / steps;
    left = left < 0 ? by_steps : std::min(left, by_steps);
  }
  if (left > 0) out += " | ETA " + format_duration(left);
  window_steps_ = 0;
  window_tokens_ = 0;
  window_seconds_ = window_comm_ = window_flops_ = window_starved_ = 0;
  window_loss_ = window_weight_ = window_aux_ = window_load_ = 0;
  window_draft_ = DraftQuality{};
  return out;
}

std::string format_duration(double seconds) {
  if (!(seconds > 0)) return "0s";
  auto s = static_cast<long long>(std::llround(seconds));
  char buffer[64];
  if (s >= 86400) std::snprintf(buffer, sizeof buffer, "%lldd%02lldh", s / 86400, (s % 86400) / 3600);
  else if (s >= 3600) std::snprintf(buffer, sizeof buffer, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  else if (s >= 60) std::snprintf(buffer, sizeof buffer, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(buffer, sizeof buffer, "%llds", s);
  return buffer;
}

}  // namespace topotrain
