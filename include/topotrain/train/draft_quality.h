// A DFlash drafter's draft quality as counts per block slot (slot 0, the anchor, is never
// drafted): its correct drafts, the slots scored, and the correct drafts of the two trivial
// drafters on the same slots (model::TrivialDrafterCounts), so that every acc@k and tau is
// read beside what a drafter that learned nothing but the token frequencies scores. Counts add
// over micro-batches, drafters and steps before anything is divided.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace topotrain {

struct DraftQuality {
  std::vector<std::int64_t> correct, valid, mode_correct, slot_mode_correct;  // each [B], or all empty

  bool empty() const { return valid.empty(); }
  // Element-wise sums; an empty side takes the other's counts.
  void add(const DraftQuality& other);

  // acc@1..acc@{B-1} and tau (model::slot_accuracy, model::acceptance_length) of the drafter
  // and of the trivial drafters.
  std::vector<double> accuracy() const;
  std::vector<double> mode_accuracy() const;
  std::vector<double> slot_mode_accuracy() const;
  double tau() const;
  double mode_tau() const;
  double slot_mode_tau() const;

  // "tau 1.23 acc@1 0.198 (trivial drafters: mode 1.21 0.177, slot-mode 1.21 0.177)"; with
  // `all_slots` every acc@k of the drafter, and the trivial drafters' tau and acc@1.
  std::string summary(bool all_slots = false) const;
};

}  // namespace topotrain
