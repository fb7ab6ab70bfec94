#include "topotrain/train/draft_quality.h"

#include <algorithm>
#include <cstdio>

#include "topotrain/model/dflash_metrics.h"

namespace topotrain {
namespace {

void add_counts(std::vector<std::int64_t>& sums, const std::vector<std::int64_t>& counts) {
  if (sums.empty()) sums.assign(counts.size(), 0);
  for (std::size_t k = 0; k < counts.size() && k < sums.size(); ++k) sums[k] += counts[k];
}

std::string tau_and_acc1(double tau, const std::vector<double>& accuracy) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f %.3f", tau, accuracy.empty() ? 0.0 : accuracy[0]);
  return text;
}

}  // namespace

void DraftQuality::add(const DraftQuality& other) {
  add_counts(correct, other.correct);
  add_counts(valid, other.valid);
  add_counts(mode_correct, other.mode_correct);
  add_counts(slot_mode_correct, other.slot_mode_correct);
}

std::vector<double> DraftQuality::accuracy() const { return model::slot_accuracy(correct, valid); }
std::vector<double> DraftQuality::mode_accuracy() const { return model::slot_accuracy(mode_correct, valid); }
std::vector<double> DraftQuality::slot_mode_accuracy() const { return model::slot_accuracy(slot_mode_correct, valid); }
double DraftQuality::tau() const { return model::acceptance_length(accuracy()); }
double DraftQuality::mode_tau() const { return model::acceptance_length(mode_accuracy()); }
double DraftQuality::slot_mode_tau() const { return model::acceptance_length(slot_mode_accuracy()); }

std::string DraftQuality::summary(bool all_slots) const {
  const std::vector<double> acc = accuracy();
  char text[64];
  std::snprintf(text, sizeof text, "tau %.2f", tau());
  std::string out = text;
  for (std::size_t k = 0; k < (all_slots ? acc.size() : std::min<std::size_t>(acc.size(), 1)); ++k) {
    std::snprintf(text, sizeof text, " acc@%zu %.3f", k + 1, acc[k]);
    out += text;
  }
  return out + " (trivial drafters: mode " + tau_and_acc1(mode_tau(), mode_accuracy()) + ", slot-mode " +
         tau_and_acc1(slot_mode_tau(), slot_mode_accuracy()) + ")";
}

}  // namespace topotrain
