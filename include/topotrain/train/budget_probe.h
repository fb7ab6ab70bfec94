// train.token_budget = "auto": the largest micro-batch a rank's memory holds, measured on
// the device before the first step of every launch (not stored for a resume: a run restarted
// on a larger device grows its budget).
// * A candidate budget runs the rank's stage (BudgetStage) on synthetic micro-batches of the
//   dataset's worst samples for it, cut at the budget as data.long_samples cuts. It fits when
//   its peak (CUDA: torch's reserved peak plus what the device holds outside torch, an
//   out-of-memory error a miss; CPU: the peak resident set) plus what the stage allocates
//   later stays within train.memory_fraction of the rank's share of the memory limit. Ranks
//   on one GPU probe in turn, so that one's misses never fail another's candidates.
// * search_token_budget doubles from kBudgetGranule, then bisects between the last fit and
//   the first miss. The stage's ranks agree on the smallest budget, then the job's; when none
//   fits, every rank throws JobExit (exit 2, naming the limit) together.
// * Each candidate is logged (a search can take minutes); a stop request ends the search and
//   the job leaves before its first step (JobExit, exit 0).
// * Training is left as found: no optimizer step, gradients undefined again, torch's CPU
//   generator restored, no data read, so that "auto" trains exactly as the budget it chose
//   would if set (tested). It runs before the training session: no timer row, no collective
//   of the gradient reducer.
#pragma once

#include <mpi.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "topotrain/batch/packed_batch.h"
#include "topotrain/data/token_dataset.h"
#include "topotrain/model/causal_lm.h"
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
// fixed_bytes and planned_bytes are agreed by the stage's ranks (the smallest plan, the
// largest fixed bytes), budget by the job's (the smallest), so that every rank shrinks
// alike after an out-of-memory.
struct MeasuredBudget {
  std::string stage;                // BudgetStage::name
  std::int64_t budget = 0;
  std::int64_t stage_budget = 0;    // the smallest that this stage's ranks fit, >= budget
  std::int64_t fixed_bytes = 0;     // before any micro-batch, with the AdamW moments to come
  std::int64_t peak_bytes = 0;      // this rank's peak at `budget`, with what the stage holds later
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
  // "train.token_budget = \"auto\": 4096 tokens per micro-batch; measured peak 1.20 GiB (..."
  // for the stage lead's log line; a job of several stages names this one's.
  std::string describe() const;
};

// What a micro-batch can hold: at most the whole dataset (more never fills one), and its
// samples' lengths, in tokens.
struct BudgetBounds {
  std::int64_t max_budget = 0;
  std::map<std::int64_t, std::int64_t> samples_of_length;  // length -> how many samples have it

  std::int64_t longest_sample() const { return samples_of_length.empty() ? 0 : samples_of_length.rbegin()->first; }
};
BudgetBounds budget_bounds(const data::TokenDataset& dataset);

// The documents of the micro-batch of `budget` tokens that the dataset's samples ranked
// first by `score` (of a length, higher first; ties: longer first) fill: as many of each
// length as the dataset has, each cut at the budget (as data.long_samples cuts a longer
// one), the last cut to fit. Some order of the samples packs exactly this batch.
std::vector<std::int64_t> worst_fill(const BudgetBounds& bounds, std::int64_t budget,
                                     const std::function<double(std::int64_t length)>& score);

// worst_fill's score for the longest samples first.
double longest_first(std::int64_t length);

// One rank's work on a micro-batch, as the probe runs it.
struct BudgetStage {
  std::string name;  // "trainer", "target", "drafter": whose measure the log line gives
  std::int64_t vocab_size = 0;
  // Scores of the stage's worst samples (worst_fill): at a budget the probe measures the
  // micro-batch each fills and keeps the largest peak.
  std::vector<std::function<double(std::int64_t length)>> worst_first;
  // Forward (and backward) of `batch`, already on the device. May draw from `draws` (never
  // from torch's generators).
  std::function<void(const PackedBatch& batch, std::mt19937_64& draws)> run;
  // What AdamW trains (none for a frozen stage): the probe drops their gradients after each
  // run and counts the moments the session allocates later.
  std::vector<torch::Tensor> trained;
  // What the stage holds later per token of the budget that `run` does not allocate
  // (hidden states queued on a link).
  double later_bytes_per_token = 0;
};

// moe_train's trainer: forward and backward of `net` on the dataset's longest samples.
BudgetStage language_model_stage(model::CausalLMImpl& net);

// train.token_budget = "auto", the one measure of both jobs: this rank measures its `stage`,
// the ranks of `stage_group` agree on the smallest budget, then, when it is another
// communicator, so do those of `job_group` (every rank whose micro-batches share the budget:
// a pipeline's every rank). Each stage group's first rank logs its measure. Collective over
// both groups.
MeasuredBudget probe_token_budget(const BudgetStage& stage, const StepConfig& step, const BudgetBounds& bounds,
                                  const torch::Device& device, MPI_Comm stage_group, MPI_Comm job_group);

}  // namespace topotrain
