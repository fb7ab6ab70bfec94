// log.profile_step = N: step N of this rank runs under torch's profiler (host calls and, on a
// GPU, kernels and copies), and the rank writes into the run directory
//   profile-step<N>-rank<R>.txt   what the step spent its time on (store/profile_summary.h)
//   profile-step<N>-rank<R>.json  a Chrome trace (chrome://tracing, ui.perfetto.dev), where
//                                 LibTorch was built with Kineto (pip torch is; Debian's is not)
// Phase times say which phase is slow; this says why (which kernels, how busy the GPU was,
// which host call it waited in).
//
//   StepProfile profile(settings, run_dir, rank, device);
//   while (...) { auto profiled = profile.step(n); ... }  // stops when the scope ends
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <torch/torch.h>


namespace topotrain {

class StepProfile {
 public:
  StepProfile(std::int64_t step, std::string run_dir, int rank, const torch::Device& device);
  // Warns when a step was chosen but never profiled (the run ended or resumed past it).
  ~StepProfile();
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;

  class Scope {
   public:
    explicit Scope(StepProfile* owner) : owner_(owner) {}
    Scope(Scope&& other) noexcept : owner_(other.owner_) { other.owner_ = nullptr; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    ~Scope() {
      if (owner_) owner_->finish();
    }

   private:
    StepProfile* owner_;
  };

  // Starts the profiler if `step` is the chosen one; it stops when the scope ends.
  [[nodiscard]] Scope step(std::int64_t step);
  // The summary file of the profiled step, empty until it was written.
  const std::string& summary_path() const { return summary_path_; }

 private:
  void finish() noexcept;

  std::int64_t chosen_;
  std::string run_dir_;
  int rank_;
  torch::Device device_;
  std::chrono::steady_clock::time_point started_;
  bool started_once_ = false;
  std::string summary_path_;
};

}  // namespace topotrain
