// What topotrain-speculate measures over its prompts, as text for people and as JSON with
// the same numbers: whether speculative decoding reproduced plain greedy decoding on every
// prompt (lossless), the acceptance length per verification (tau, its histogram, tau by
// position in the response), target forwards per generated token and tokens/s of both; and,
// per prompt, its ids, both responses and every verification's acceptance length as JSON lines,
// for a reference implementation to reproduce token for token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topotrain/infer/prompt_set.h"
#include "topotrain/infer/speculative_decoding.h"

namespace topotrain::infer {

// One prompt decoded both ways.
struct PromptOutcome {
  int64_t prompt_tokens = 0;
  Decoded greedy, speculative;
  Decoded trivial;  // speculation with the trivial drafter (constant_proposer.h), where it ran
};

// What was run, for the report's first lines.
struct SpeculationSetup {
  std::string target, drafter, prompts;  // paths as given
  std::string device, dtype;             // "cuda:0", "bf16"
  int64_t max_new_tokens = 0;
  std::vector<int64_t> stop_tokens;
  std::vector<int64_t> taps;  // the target layers the drafter reads
  int64_t trivial_token = -1;  // the trivial drafter's token; -1: it did not run
};

struct PositionBucket {
  int64_t first = 0;          // response positions [first, first + bucket width)
  int64_t verifications = 0;  // whose first token stands there
  double tau = 0;             // their mean acceptance length
};

struct SpeculationReport {
  SpeculationSetup setup;
  int64_t block_size = 0;
  int64_t prompts = 0, prompt_tokens = 0;
  int64_t greedy_tokens = 0, speculative_tokens = 0;
  // Prompts whose speculative response differs from the greedy one, and the first of them
  // (prompt index, response position of the first difference); -1 when none.
  int64_t mismatched_prompts = 0, first_mismatch_prompt = -1, first_mismatch_position = -1;
  int64_t verifications = 0;
  double tau = 0;
  // The trivial drafter's tau and target forwards per generated token on the same prompts
  // (setup.trivial_token >= 0).
  double trivial_tau = 0, trivial_forwards_per_token = 0;
  std::vector<int64_t> acceptance_histogram;  // [B]: entry L - 1 counts acceptance length L
  int64_t bucket_width = 0;
  std::vector<PositionBucket> tau_by_position;  // buckets with at least one verification
  int64_t greedy_forwards = 0, speculative_forwards = 0;
  double greedy_seconds = 0, speculative_seconds = 0;
  std::vector<PromptOutcome> outcomes;  // every prompt's, in the prompts' order

  double greedy_forwards_per_token() const;
  double speculative_forwards_per_token() const;
  double greedy_tokens_per_second() const;
  double speculative_tokens_per_second() const;
};

// The outcomes of a drafter of block size `block_size`, tau by position in buckets of
// `bucket_width` response tokens.
SpeculationReport summarize(const std::vector<PromptOutcome>& outcomes, const SpeculationSetup& setup,
                            int64_t block_size, int64_t bucket_width = 32);

std::string report_text(const SpeculationReport& report);
std::string report_json(const SpeculationReport& report);  // one JSON object, indented
// One line per prompt of `prompts` (those the report's outcomes were decoded from):
// {"prompt": [ids], "greedy": [ids], "speculative": [ids], "acceptance_lengths": [...]}.
std::string responses_jsonl(const SpeculationReport& report, const PromptSet& prompts);

}  // namespace topotrain::infer
