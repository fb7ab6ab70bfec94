#include "topotrain/infer/speculation_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "topotrain/core/error.h"

namespace topotrain::infer {
namespace {

double ratio(double numerator, double denominator) { return denominator > 0 ? numerator / denominator : 0.0; }

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

std::string joined(const std::vector<int64_t>& values) {
  std::string out;
  for (int64_t v : values) out += (out.empty() ? "" : ",") + std::to_string(v);
  return out.empty() ? "none" : out;
}

// The first response position where the two differ (one ending early counts), or -1.
int64_t first_difference(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const auto shorter = std::min(a.size(), b.size());
  const auto at = std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(shorter), b.begin()).first;
  const auto position = static_cast<int64_t>(at - a.begin());
  return position < static_cast<int64_t>(shorter) || a.size() != b.size() ? position : -1;
}

}  // namespace

double SpeculationReport::greedy_forwards_per_token() const { return ratio(greedy_forwards, greedy_tokens); }
double SpeculationReport::speculative_forwards_per_token() const {
  return ratio(speculative_forwards, speculative_tokens);
}
double SpeculationReport::greedy_tokens_per_second() const { return ratio(greedy_tokens, greedy_seconds); }
double SpeculationReport::speculative_tokens_per_second() const {
  return ratio(speculative_tokens, speculative_seconds);
}

SpeculationReport summarize(const std::vector<PromptOutcome>& outcomes, const SpeculationSetup& setup,
                            int64_t block_size, int64_t bucket_width) {
  if (block_size < 2 || bucket_width < 1) {
    throw std::invalid_argument(cat("summarize: block size ", block_size, " and bucket width ", bucket_width,
                                    " must be >= 2 and >= 1"));
  }
  SpeculationReport r;
  r.setup = setup;
  r.block_size = block_size;
  r.bucket_width = bucket_width;
  r.acceptance_histogram.assign(static_cast<size_t>(block_size), 0);
  std::map<int64_t, std::pair<int64_t, int64_t>> buckets;  // first position -> verifications, length sum
  int64_t length_sum = 0;
  int64_t trivial_lengths = 0, trivial_verifications = 0, trivial_forwards = 0, trivial_tokens = 0;
  for (size_t p = 0; p < outcomes.size(); ++p) {
    const PromptOutcome& o = outcomes[p];
    ++r.prompts;
    r.prompt_tokens += o.prompt_tokens;
    r.greedy_tokens += static_cast<int64_t>(o.greedy.tokens.size());
    r.speculative_tokens += static_cast<int64_t>(o.speculative.tokens.size());
    r.greedy_forwards += o.greedy.target_forwards;
    r.speculative_forwards += o.speculative.target_forwards;
    r.greedy_seconds += o.greedy.seconds;
    r.speculative_seconds += o.speculative.seconds;
    const int64_t differs = first_difference(o.greedy.tokens, o.speculative.tokens);
    if (differs >= 0 && r.mismatched_prompts++ == 0) {
      r.first_mismatch_prompt = static_cast<int64_t>(p);
      r.first_mismatch_position = differs;
    }
    for (int64_t length : o.trivial.acceptance_lengths) trivial_lengths += length;
    trivial_verifications += static_cast<int64_t>(o.trivial.acceptance_lengths.size());
    trivial_forwards += o.trivial.target_forwards;
    trivial_tokens += static_cast<int64_t>(o.trivial.tokens.size());
    const auto& lengths = o.speculative.acceptance_lengths;
    for (size_t v = 0; v < lengths.size(); ++v) {
      if (lengths[v] < 1 || lengths[v] > block_size) {
        throw std::logic_error(cat("summarize: acceptance length ", lengths[v], " is outside [1, ", block_size, "]"));
      }
      ++r.acceptance_histogram[static_cast<size_t>(lengths[v] - 1)];
      auto& bucket = buckets[o.speculative.verification_positions.at(v) / bucket_width * bucket_width];
      ++bucket.first;
      bucket.second += lengths[v];
      length_sum += lengths[v];
      ++r.verifications;
    }
  }
  r.tau = ratio(length_sum, r.verifications);
  r.trivial_tau = ratio(trivial_lengths, trivial_verifications);
  r.trivial_forwards_per_token = ratio(trivial_forwards, trivial_tokens);
  for (const auto& [first, counts] : buckets) {
    r.tau_by_position.push_back({first, counts.first, ratio(counts.second, counts.first)});
  }
  r.outcomes = outcomes;
  return r;
}

std::string report_text(const SpeculationReport& r) {
  const SpeculationSetup& s = r.setup;
  std::string out;
  out += cat("target  ", s.target, "\ndrafter ", s.drafter, " (block size ", r.block_size, ", target layers ",
             joined(s.taps), ")\n");
  out += cat("prompts ", s.prompts, ": ", r.prompts, " prompts, ", r.prompt_tokens, " tokens; up to ", s.max_new_tokens,
             " new tokens each, stop tokens ", joined(s.stop_tokens), "; ", s.device, " ", s.dtype, "\n\n");
  if (r.mismatched_prompts == 0) {
    out += cat("lossless: all ", r.prompts, " speculative responses equal plain greedy decoding token for token\n");
  } else {
    out += cat("NOT lossless: ", r.mismatched_prompts, " of ", r.prompts,
               " speculative responses differ from plain greedy decoding (first: prompt ", r.first_mismatch_prompt,
               " at response token ", r.first_mismatch_position,
               "); in bf16 a near tie between two tokens may round either way, in fp32 this is a bug\n");
  }
  out += cat("acceptance length tau ", format("%.3f", r.tau), " over ", r.verifications,
             " verifications (accepted drafts + 1 per target forward)\n");
  if (s.trivial_token >= 0) {
    out += cat("  trivial drafter (token ", s.trivial_token, ", the greedy responses' most frequent, in every slot): tau ",
               format("%.3f", r.trivial_tau), ", ", format("%.3f", r.trivial_forwards_per_token),
               " target forwards per token\n");
  }
  out += "  length  verifications  share\n";
  for (size_t i = 0; i < r.acceptance_histogram.size(); ++i) {
    const auto count = r.acceptance_histogram[i];
    const double share = ratio(count, r.verifications);
    out += cat(format("  %6.0f", double(i + 1)), format("  %13.0f", double(count)), format("  %5.1f%%  ", 100 * share),
               std::string(static_cast<size_t>(share * 40 + 0.5), '#'), "\n");
  }
  out += cat("tau by response position (", r.bucket_width, " tokens a bucket):\n");
  for (const PositionBucket& b : r.tau_by_position) {
    out += cat(format("  %5.0f", double(b.first)), format("-%-5.0f", double(b.first + r.bucket_width - 1)),
               format("  tau %.3f", b.tau), "  (", b.verifications, " verifications)\n");
  }
  out += cat("\n                 tokens  target forwards  forwards/token  seconds  tokens/s\n");
  out += cat("  greedy       ", format("%8.0f", double(r.greedy_tokens)), format("  %15.0f", double(r.greedy_forwards)),
             format("  %14.3f", r.greedy_forwards_per_token()), format("  %7.2f", r.greedy_seconds),
             format("  %8.1f", r.greedy_tokens_per_second()), "\n");
  out += cat("  speculative  ", format("%8.0f", double(r.speculative_tokens)),
             format("  %15.0f", double(r.speculative_forwards)), format("  %14.3f", r.speculative_forwards_per_token()),
             format("  %7.2f", r.speculative_seconds), format("  %8.1f", r.speculative_tokens_per_second()), "\n");
  out += cat("speedup: ", format("%.2fx", ratio(r.greedy_forwards_per_token(), r.speculative_forwards_per_token())),
             " fewer target forwards per token, ",
             format("%.2fx", ratio(r.speculative_tokens_per_second(), r.greedy_tokens_per_second())),
             " tokens/s\n");
  return out;
}

std::string report_json(const SpeculationReport& r) {
  using nlohmann::json;
  const SpeculationSetup& s = r.setup;
  json buckets = json::array();
  for (const PositionBucket& b : r.tau_by_position) {
    buckets.push_back({{"first", b.first}, {"verifications", b.verifications}, {"tau", b.tau}});
  }
  const json report = {
      {"setup",
       {{"target", s.target}, {"drafter", s.drafter}, {"prompts", s.prompts}, {"device", s.device},
        {"dtype", s.dtype}, {"max_new_tokens", s.max_new_tokens}, {"stop_tokens", s.stop_tokens}, {"taps", s.taps},
        {"block_size", r.block_size}}},
      {"prompts", r.prompts},
      {"prompt_tokens", r.prompt_tokens},
      {"lossless",
       {{"mismatched_prompts", r.mismatched_prompts},
        {"first_mismatch_prompt", r.first_mismatch_prompt},
        {"first_mismatch_position", r.first_mismatch_position}}},
      {"verifications", r.verifications},
      {"tau", r.tau},
      {"trivial",
       {{"token", s.trivial_token}, {"tau", r.trivial_tau}, {"forwards_per_token", r.trivial_forwards_per_token}}},
      {"acceptance_histogram", r.acceptance_histogram},
      {"tau_by_position", {{"bucket_width", r.bucket_width}, {"buckets", buckets}}},
      {"greedy",
       {{"tokens", r.greedy_tokens}, {"target_forwards", r.greedy_forwards},
        {"forwards_per_token", r.greedy_forwards_per_token()}, {"seconds", r.greedy_seconds},
        {"tokens_per_second", r.greedy_tokens_per_second()}}},
      {"speculative",
       {{"tokens", r.speculative_tokens}, {"target_forwards", r.speculative_forwards},
        {"forwards_per_token", r.speculative_forwards_per_token()}, {"seconds", r.speculative_seconds},
        {"tokens_per_second", r.speculative_tokens_per_second()}}},
  };
  return report.dump(2) + "\n";
}

std::string responses_jsonl(const SpeculationReport& report, const PromptSet& prompts) {
  if (prompts.prompts.size() != report.outcomes.size()) {
    throw std::logic_error(cat("responses_jsonl: ", prompts.prompts.size(), " prompts for ", report.outcomes.size(),
                               " outcomes"));
  }
  std::string out;
  for (size_t p = 0; p < report.outcomes.size(); ++p) {
    const PromptOutcome& o = report.outcomes[p];
    const nlohmann::json line = {{"prompt", prompts.prompts[p].tokens},
                                 {"greedy", o.greedy.tokens},
                                 {"speculative", o.speculative.tokens},
                                 {"acceptance_lengths", o.speculative.acceptance_lengths}};
    out += line.dump() + "\n";
  }
  return out;
}

}  // namespace topotrain::infer
