// train.token_budget = "auto" (moe_train): the largest micro-batch a rank's memory holds,
// measured on the device before the first step of every launch (not stored for a resume,
// so that a run restarted on a larger device grows its budget).
//
// Each trainer rank runs forward and backward on synthetic micro-batches shaped like the
// packer's worst case at a candidate budget: sequences of the longest sample's length, or of
// the whole budget when a sample is longer (data.long_samples splits or truncates it there),
// filling the budget (attention's worst case), token ids drawn below the vocabulary by a
// generator of the probe's own. It measures the peak: on CUDA the peak of what torch's
// allocator reserves, fragmentation included, plus what the device holds outside torch
// (the CUDA context, libraries, other processes; an out-of-memory error is a miss, and the
// cache is released), on CPU the process's peak resident set. A candidate fits when that peak plus the AdamW state the training
// session allocates later stays within memory_fraction of the memory limit
// (train.memory_limit, else the GPU's capacity, on CPU the machine's RAM shared by its
// ranks). search_token_budget picks the candidates: doubling from kBudgetGranule, then a
// binary search between the last fit and the first miss. The group agrees on the smallest
// rank's budget in one all-reduce; when the smallest candidate fits no rank, every rank
// throws JobExit (exit 2, the message naming the limit and what a rank holds) together.
//
// The probe leaves training as it found it: no optimizer step, the gradients dropped again
// (undefined, as before the probe), torch's CPU generator restored, and no data read, so
// that a run with "auto" trains exactly as one with the chosen budget set (tested). It runs
// before the training session exists: no step, no timer row, no collective of the
// gradient reducer.
#pragma once

#include <mpi.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "topotrain/model/qwen3.h"
#include "topotrain/train/run_config.h"

namespace topotrain {

// Automatic budgets are multiples of this (tensor-core and kernel tile friendly).
constexpr std::int64_t kBudgetGranule = 128;

struct BudgetSearch {
  std::int64_t budget = 0;  // the largest candidate that fit; 0: not even the smallest
  int probes = 0;           // calls of `fits`
};
// The largest multiple of `granule` up to `max_budget` (max_budget itself when it is below
// `granule`) for which `fits` holds, assuming that whatever fits at a budget fits below it:
// candidates double from `granule` to the first miss, then a binary search on multiples of
// `granule` between the last fit and that miss. Never asks about a budget above max_budget.
BudgetSearch search_token_budget(const std::function<bool(std::int64_t)>& fits, std::int64_t max_budget,
                                 std::int64_t granule = kBudgetGranule);

// What the probe measured, for the log, the checkpoint's record, and a later out-of-memory.
// budget, fixed_bytes and planned_bytes are agreed by the group (the smallest budget and
// plan, the largest fixed bytes), so that every rank shrinks alike after an out-of-memory.
struct MeasuredBudget {
  std::int64_t budget = 0;
  std::int64_t fixed_bytes = 0;     // before any micro-batch, with the AdamW state to come
  std::int64_t peak_bytes = 0;      // this rank's peak at `budget`, with the AdamW state to come
  std::int64_t planned_bytes = 0;   // memory_fraction x capacity_bytes
  std::int64_t capacity_bytes = 0;  // this rank's: train.memory_limit, else the device's
  double seconds = 0;               // the probe's wall time on this rank
  int probes = 0;

  // Bytes a token of a micro-batch adds to the peak.
  double bytes_per_token() const;
  // The budget after an out-of-memory at `token_budget` whose failing step peaked at
  // `failing_peak_bytes` (0 where unknown): what that peak says fits the plan, taking the
  // measured fixed bytes as they are and scaling the per-token part, at most 0.9x
  // `token_budget`, a multiple of kBudgetGranule where that is not 0; nullopt at 1.
  std::optional<std::int64_t> after_out_of_memory(std::int64_t token_budget, std::int64_t failing_peak_bytes) const;
  // "budget 4096 tokens: peak 1.20 GiB (..." for the lead's log line.
  std::string describe() const;
};

// Collective over `group` (the trainers). `max_budget`: the largest budget worth having
// (a micro-batch holds at most the whole dataset); `longest_sample`: the dataset's, in tokens.
MeasuredBudget probe_token_budget(model::Qwen3CausalLMImpl& net, const StepConfig& step, std::int64_t max_budget,
                                  std::int64_t longest_sample, const torch::Device& device, int ranks_on_machine,
                                  MPI_Comm group);

}  // namespace topotrain
