#include "topotrain/train/start_block.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/model/model_cost.h"

namespace topotrain {

std::vector<std::string> start_block_lines(const StartBlock& block) {
  std::vector<std::string> out;
  out.push_back(cat(block.job, " launch ", block.launch, " of ", block.run_dir, ", ",
                    block.resumed_from.empty() ? std::string("fresh")
                                               : cat("resumed from ", block.resumed_from, " (step ",
                                                     block.resumed_step, ")")));
  std::size_t width = 0;
  for (const auto& [name, text] : block.lines) width = std::max(width, name.size());
  for (const auto& [name, text] : block.lines)
    out.push_back(cat("  ", name, std::string(width + 2 - name.size(), ' '), text));
  return out;
}

void log_start_block(const StartBlock& block) {
  for (const std::string& line : start_block_lines(block)) log_info_here(line);
}

std::string count_text(double count) {
  static const char* const kSuffixes[] = {"", "K", "M", "B", "T"};
  int suffix = 0;
  while (suffix < 4 && std::fabs(count) >= 999.5) {
    count /= 1000;
    ++suffix;
  }
  const double shown = std::fabs(count);
  const int decimals = suffix == 0 || shown >= 99.95 ? 0 : shown >= 9.995 ? 1 : 2;
  char text[32];
  std::snprintf(text, sizeof text, "%.*f%s", decimals, count, kSuffixes[suffix]);
  return text;
}

std::string model_text(const model::ModelConfig& config) {
  const model::ParameterCounts n = model::count_parameters(config);
  return cat(config.source, " (", config.family_name(), ", ", config.num_hidden_layers,
             " layers, hidden ", config.hidden_size, "): ", count_text(static_cast<double>(n.total)), " parameters",
             config.is_moe() ? cat(", ", count_text(static_cast<double>(n.active)), " active per token") : "");
}

}  // namespace topotrain
