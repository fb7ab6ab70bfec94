#include "topotrain/train/progress.h"

#include <cmath>
#include <cstdio>

namespace topotrain {

ProgressMeter::ProgressMeter(int devices, double flops_per_token, double peak_flops, std::int64_t target_tokens)
    : devices_(devices), flops_per_token_(flops_per_token), peak_flops_(peak_flops), target_tokens_(target_tokens) {}

void ProgressMeter::record(const StepReport& report, std::int64_t tokens_done) {
  last_ = report;
  tokens_done_ = tokens_done;
  window_tokens_ += report.tokens;
  window_seconds_ += report.seconds;
  window_comm_ += report.comm_seconds;
}

std::string ProgressMeter::line() {
  const double rate = window_seconds_ > 0 ? static_cast<double>(window_tokens_) / window_seconds_ : 0.0;
  char buffer[512];
  int n = std::snprintf(buffer, sizeof buffer,
                        "step %lld | loss %.4f aux %.4f | lr %.2e | gnorm %.3g | %.1f Ktok/s (%.1f per GPU)",
                        static_cast<long long>(last_.step), last_.loss, last_.aux_loss, last_.lr, last_.grad_norm,
                        rate / 1e3, rate / 1e3 / devices_);
  std::string out(buffer, n);
  if (peak_flops_ > 0 && flops_per_token_ > 0) {
    std::snprintf(buffer, sizeof buffer, " | MFU %.1f%%", 100.0 * rate * flops_per_token_ / (peak_flops_ * devices_));
    out += buffer;
  }
  std::snprintf(buffer, sizeof buffer, " | comm %.0f%% | %lld coll | mem %.2f GiB",
                window_seconds_ > 0 ? 100.0 * window_comm_ / window_seconds_ : 0.0,
                static_cast<long long>(last_.collectives), static_cast<double>(last_.peak_memory) / (1 << 30));
  out += buffer;
  if (target_tokens_ > 0 && rate > 0)
    out += " | ETA " + format_duration(static_cast<double>(target_tokens_ - tokens_done_) / rate);
  window_tokens_ = 0;
  window_seconds_ = 0;
  window_comm_ = 0;
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
