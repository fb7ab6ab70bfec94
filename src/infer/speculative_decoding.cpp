#include "topotrain/infer/speculative_decoding.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "topotrain/core/error.h"

namespace topotrain::infer {
namespace {

using Clock = std::chrono::steady_clock;

// A decode under way, from its clock start and the prompt's forward over an emptied cache to
// the response it returns. add() keeps a token and says whether decoding goes on.
class Decoding {
 public:
  Decoding(CachedTarget& target, const std::vector<int64_t>& prompt, const DecodeOptions& options)
      : options_(options), start_(Clock::now()) {
    if (prompt.empty()) throw std::invalid_argument("decode: the prompt is empty");
    if (options.max_new_tokens < 1) {
      throw std::invalid_argument(cat("decode: max_new_tokens must be >= 1, got ", options.max_new_tokens));
    }
    device = target.model().model->embed_tokens->weight.device();
    target.clear();
    prompt_step = target.forward(torch::tensor(prompt, torch::kInt64).to(device));
    first = target.greedy_tokens(prompt_step.hidden.narrow(0, prompt_step.hidden.size(0) - 1, 1)).item<int64_t>();
    out.target_forwards = 1;
  }

  bool add(int64_t token) {
    out.tokens.push_back(token);
    const auto& stops = options_.stop_tokens;
    return static_cast<int64_t>(out.tokens.size()) < options_.max_new_tokens &&
           std::find(stops.begin(), stops.end(), token) == stops.end();
  }

  Decoded finish() {
    out.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    return std::move(out);
  }

  torch::Device device{torch::kCPU};
  TargetStep prompt_step;
  int64_t first = 0;  // the target's token after the prompt
  Decoded out;

 private:
  const DecodeOptions& options_;
  Clock::time_point start_;
};

}  // namespace

Decoded greedy_decode(CachedTarget& target, const std::vector<int64_t>& prompt, const DecodeOptions& options) {
  Decoding d(target, prompt, options);
  for (int64_t next = d.first; d.add(next);) {
    const TargetStep step = target.forward(torch::full({1}, next, torch::TensorOptions(torch::kInt64).device(d.device)));
    ++d.out.target_forwards;
    next = target.greedy_tokens(step.hidden).item<int64_t>();
  }
  return d.finish();
}

Decoded speculative_decode(CachedTarget& target, BlockProposer& proposer, const std::vector<int64_t>& prompt,
                           const DecodeOptions& options) {
  const int64_t B = proposer.block_size(), prompt_length = static_cast<int64_t>(prompt.size());
  Decoding d(target, prompt, options);
  proposer.reset();
  proposer.extend_context(d.prompt_step.taps);
  for (int64_t next = d.first; d.add(next);) {
    const int64_t start = target.length();
    if (proposer.context_length() != start) {
      throw std::logic_error(cat("speculative_decode: the drafter's context holds ", proposer.context_length(),
                                 " positions, the target's cache ", start));
    }
    const auto drafts = proposer.propose(next).to(d.device);
    const auto block = torch::cat({torch::full({1}, next, drafts.options()), drafts});
    const TargetStep verify = target.forward(block);
    ++d.out.target_forwards;
    // Proposals and the target's choices come back in one copy: the step's one synchronisation.
    const auto host = torch::cat({drafts, target.greedy_tokens(verify.hidden)}).cpu();
    const int64_t* proposed = host.data_ptr<int64_t>();
    const int64_t* posterior = proposed + (B - 1);
    int64_t accepted = 0;
    while (accepted < B - 1 && proposed[accepted] == posterior[accepted]) ++accepted;
    d.out.acceptance_lengths.push_back(accepted + 1);
    d.out.verification_positions.push_back(start - prompt_length);

    bool going = true;
    for (int64_t j = 0; j < accepted && going; ++j) going = d.add(proposed[j]);
    if (!going) break;
    next = posterior[accepted];  // the bonus token, kept by the loop's add()
    target.crop(start + accepted + 1);
    proposer.extend_context(verify.taps.narrow(0, 0, accepted + 1));
  }
  return d.finish();
}

}  // namespace topotrain::infer
