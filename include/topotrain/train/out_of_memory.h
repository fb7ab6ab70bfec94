// CUDA out-of-memory as a recoverable, agreed event rather than a crash.
//
// A rank that runs out of memory keeps walking the step's schedule (the gradient
// reducer must issue the same collectives on every rank), reports it at the step's
// agreement point, and then every rank either exits with a message that carries the exact
// resume command (train.oom = "fail") or halves token_budget and retries the step from the
// same data position (train.oom = "shrink"; with train.token_budget = "auto" it shrinks by
// what the probe measured instead of halving). The last checkpoint is untouched either way.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>

#include "topotrain/train/job.h"

namespace topotrain {

struct MeasuredBudget;  // budget_probe.h

bool is_out_of_memory(const std::exception& error);

// The budget a run goes on with after an out-of-memory at `token_budget`: under train.oom =
// "shrink" while it is above 1, half of it, or with an automatic budget (`measured`, the
// probe's) what the failing step's peak (`failing_peak_bytes`, agreed) says fits
// (MeasuredBudget::after_out_of_memory); else nullopt (the job ends with the resume
// command). Every rank and role that shrinks asks this, so all agree on one budget.
std::optional<std::int64_t> shrunk_budget(const StepConfig& step, std::int64_t token_budget,
                                          const MeasuredBudget* measured = nullptr,
                                          std::int64_t failing_peak_bytes = 0);
// What a shrink's log line names as its cause: train.oom = "shrink", or the automatic
// budget, which shrinks unless train.oom = "fail".
std::string shrink_cause(const StepConfig& step);

// Test hook (fault_injection.h): TOPOTRAIN_FAULT_OOM="RANK:STEP" makes that rank raise an
// out-of-memory error once, in that step, so the failure path can be tested without a GPU.
void fault_inject_out_of_memory(int rank, std::int64_t step);

// The job's end after an out-of-memory: the rank, step, budget and peak, and the command that
// goes on with half the budget: --resume auto from run_dir's last checkpoint, or --resume fresh
// where checkpoints are off and it holds none.
std::string out_of_memory_message(const JobContext& context, int rank, std::int64_t step,
                                  std::int64_t token_budget, std::int64_t peak_bytes, const std::string& run_dir);

std::string first_line(const std::string& text);

}  // namespace topotrain
