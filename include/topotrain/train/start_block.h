// The few lines a launch's lead prints before its first step, in place of the ~60 resolved
// settings (those go to the run directory's settings.toml: launch_settings.h):
//
//   moe_train launch 2 of /ckpt/cpu4, resumed from /ckpt/cpu4/step-00000040.h5 (step 40)
//     model     tiny-moe (Qwen3-MoE, 3 layers, hidden 64): 213K parameters, 156K active per token
//     data      build/data/demo.h5: 771 documents, 237K tokens
//     budget    4 ranks x 2 micro-batches of 1024 tokens = 8192 tokens per step
//     length    2 epoch(s); LR schedule over 473060 tokens
//     settings  /ckpt/cpu4/settings.toml
//
// A fresh run says "fresh" where a resumed one names its checkpoint. Each line is a log line
// of its own (log.txt keeps its prefix on every line).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "topotrain/model/config.h"

namespace topotrain {

struct StartBlock {
  std::string job;           // "moe_train"
  int launch = 1;            // TimingLog::launch
  std::string run_dir;
  std::string resumed_from;  // the checkpoint; empty: a fresh run
  std::int64_t resumed_step = 0;
  // What each line says after its name, in order: "model", "data", "budget", "length",
  // "settings" (a pipeline has a "target" and a "drafter" line instead of "model").
  std::vector<std::pair<std::string, std::string>> lines;
};

std::vector<std::string> start_block_lines(const StartBlock& block);
// Each line logged by the calling rank (log_info_here).
void log_start_block(const StartBlock& block);

// "213K", "523M", "8.19B": a count with three significant digits.
std::string count_text(double count);
// "tiny-moe (Qwen3-MoE, 3 layers, hidden 64): 213K parameters, 156K active per token" (active
// only for a mixture of experts).
std::string model_text(const model::ModelConfig& config);

}  // namespace topotrain
