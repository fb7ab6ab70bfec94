// Test helper: a BlockProposer whose proposals are a known continuation (the target's greedy
// one), made wrong at chosen slots of chosen verifications, so that the acceptance length of
// every verification is known before decoding.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "topotrain/infer/block_proposer.h"

namespace topotrain::test_support {

class OracleProposer : public infer::BlockProposer {
 public:
  // `truth`: the prompt followed by the continuation; `errors`: verification index -> the first
  // wrong slot k in [1, B) (acceptance length k there, B elsewhere while truth lasts).
  OracleProposer(int64_t block_size, int64_t vocab_size, std::vector<int64_t> truth, std::map<int64_t, int64_t> errors)
      : block_size_(block_size), vocab_(vocab_size), truth_(std::move(truth)), errors_(std::move(errors)) {}

  int64_t block_size() const override { return block_size_; }
  void reset() override { context_ = 0, calls_ = 0; }
  void extend_context(const torch::Tensor& taps) override { context_ += taps.size(0); }
  int64_t context_length() const override { return context_; }
  torch::Tensor propose(int64_t) override {
    std::vector<int64_t> out;
    const auto wrong = errors_.find(calls_++);
    for (int64_t k = 1; k < block_size_; ++k) {
      const auto at = static_cast<size_t>(context_ + k);
      const int64_t right = at < truth_.size() ? truth_[at] : 0;
      out.push_back(wrong != errors_.end() && wrong->second == k ? (right + 1) % vocab_ : right);
    }
    return torch::tensor(out, torch::kInt64);
  }

  int64_t calls() const { return calls_; }

 private:
  int64_t block_size_, vocab_;
  std::vector<int64_t> truth_;
  std::map<int64_t, int64_t> errors_;
  int64_t context_ = 0, calls_ = 0;
};

}  // namespace topotrain::test_support
