#include "topotrain/model/dflash_metrics.h"

#include <stdexcept>

#include "topotrain/core/error.h"

namespace topotrain::model {

std::vector<double> slot_accuracy(const std::vector<int64_t>& correct, const std::vector<int64_t>& valid) {
  if (correct.size() != valid.size() || correct.size() < 2) {
    throw std::invalid_argument(cat("slot_accuracy: expected two per-slot count vectors of one size >= 2, got ",
                                    correct.size(), " and ", valid.size()));
  }
  std::vector<double> accuracy;
  for (size_t k = 1; k < correct.size(); ++k) {
    accuracy.push_back(valid[k] > 0 ? static_cast<double>(correct[k]) / static_cast<double>(valid[k]) : 0.0);
  }
  return accuracy;
}

double acceptance_length(const std::vector<double>& accuracy) {
  double tau = 1, prefix = 1;
  for (double acc : accuracy) {
    prefix *= acc;
    tau += prefix;
  }
  return tau;
}

}  // namespace topotrain::model
