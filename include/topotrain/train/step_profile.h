// log.profile_step = N: steps N .. N + log.profile_steps - 1 of this rank run under torch's
// profiler (host calls and, on a GPU, kernels and copies), and the rank writes into the run
// directory
//   profile-step<N>-rank<R>.txt   what the steps spent their time on (store/profile_summary.h)
//   profile-step<N>-rank<R>.json  a Chrome trace (chrome://tracing, ui.perfetto.dev), where
//                                 LibTorch was built with Kineto (pip torch is; Debian's is not)
// Phase times say which phase is slow; this says why (which kernels, how busy the GPU was,
// which host call it waited in).
//
// Recording every host call costs the host several microseconds per operation, enough to make
// a step whose host is ahead of its GPU look idle between kernels. log.profile_host = false
// (GPU ranks only) records the device alone and does not drain it before the first profiled
// step: the steps are the steady state an unprofiled run has, and their idle is real. The
// first recorded activities may then be the previous step's last kernels.
//
//   StepProfile profile(request, run_dir, rank, device);
//   while (...) { auto profiled = profile.step(n); ... }  // stops when the last step's scope ends
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <torch/torch.h>


namespace topotrain {

struct ProfileRequest {
  std::int64_t first_step = 0;  // log.profile_step; 0: no profile
  std::int64_t steps = 1;       // log.profile_steps: consecutive steps in one profile
  bool host = true;             // log.profile_host: false records the device only
};

class StepProfile {
 public:
  // Throws std::invalid_argument for a device-only request on a rank without a GPU.
  StepProfile(const ProfileRequest& request, std::string run_dir, int rank, const torch::Device& device);
  // Warns when a step was chosen but never profiled (the run ended or resumed past it; not
  // while an exception ends the launch), and writes what was recorded when the run ended
  // inside the profiled steps.
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

  // Starts the profiler at the first requested step; it stops when the last one's scope ends.
  [[nodiscard]] Scope step(std::int64_t step);
  // The summary file of the profiled steps, empty until it was written.
  const std::string& summary_path() const { return summary_path_; }

 private:
  void finish() noexcept;

  std::int64_t last_step() const { return request_.first_step + request_.steps - 1; }

  ProfileRequest request_;
  std::string run_dir_;
  int rank_;
  torch::Device device_;
  std::chrono::steady_clock::time_point started_;
  bool started_once_ = false;
  bool recording_ = false;
  std::int64_t last_recorded_ = 0;
  std::string summary_path_;
};

}  // namespace topotrain
