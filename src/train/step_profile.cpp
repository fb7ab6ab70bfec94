#include "topotrain/train/step_profile.h"

#include <exception>

#include <torch/csrc/autograd/profiler_kineto.h>

#include <fstream>
#include <set>
#include <stdexcept>
#include <vector>

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/store/profile_summary.h"
#include "topotrain/torch_compat.h"

namespace topotrain {
namespace {

namespace profiler = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

impl::ProfilerConfig profiler_config() {
  return impl::ProfilerConfig(impl::ProfilerState::KINETO, /*report_input_shapes=*/false, /*profile_memory=*/false,
                              /*with_stack=*/false, /*with_flops=*/false, /*with_modules=*/false);
}

std::set<impl::ActivityType> activities(const ProfileRequest& request, const torch::Device& device) {
  std::set<impl::ActivityType> chosen;
  if (request.host) chosen.insert(impl::ActivityType::CPU);
  if (device.is_cuda()) chosen.insert(impl::ActivityType::CUDA);
  return chosen;
}

std::string steps_named(std::int64_t first, std::int64_t last) {
  return first == last ? cat("step ", first) : cat("steps ", first, "-", last);
}

}  // namespace


StepProfile::StepProfile(const ProfileRequest& request, std::string run_dir, int rank, const torch::Device& device)
    : request_(request), run_dir_(std::move(run_dir)), rank_(rank), device_(device) {
  if (request_.steps < 1) throw std::invalid_argument(cat("log.profile_steps must be >= 1, got ", request_.steps));
  if (request_.first_step > 0 && !request_.host && !device_.is_cuda()) {
    throw std::invalid_argument(cat("log.profile_host = false records only GPU activity, and rank ", rank_,
                                    " runs on ", device_.str(), ": set log.profile_host = true to profile it"));
  }
}

StepProfile::~StepProfile() {
  if (recording_) finish();
  // Not while an exception unwinds the launch (a refused resume, a failed step): its reason
  // is the news, and the last line of log.txt.
  if (request_.first_step > 0 && !started_once_ && std::uncaught_exceptions() == 0)
    log_warn(cat("log.profile_step = ", request_.first_step, ": this rank never ran step ", request_.first_step,
                 ", so no profile was written"));
}

StepProfile::Scope StepProfile::step(std::int64_t step) {
  if (request_.first_step <= 0 || step < request_.first_step || step > last_step()) return Scope(nullptr);
  if (step == request_.first_step) {
    // A host-side profile starts from a drained device, so that the previous step's kernels
    // stay out of it; a device-only one keeps the steady state the host's lead gives.
    if (request_.host) compat::synchronize(device_);
    profiler::prepareProfiler(profiler_config(), activities(request_, device_));
    profiler::enableProfiler(profiler_config(), activities(request_, device_));
    started_ = std::chrono::steady_clock::now();
    started_once_ = true;
    recording_ = true;
  }
  if (recording_) last_recorded_ = step;
  return Scope(recording_ && step == last_step() ? this : nullptr);
}

// Runs at the end of a scope, also while an exception unwinds: a failure to write the
// profile is reported and does not replace the error in flight.
void StepProfile::finish() noexcept {
  recording_ = false;
  try {
    try {
      compat::synchronize(device_);
    } catch (const std::exception&) {
      // The step failed on the device; its error is already on its way. Still stop the
      // profiler and write what it saw.
    }
    const double wall_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started_).count();
    std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
    std::vector<ProfiledEvent> events;
    events.reserve(result->events().size());
    for (const auto& e : result->events()) {
      events.push_back({e.name(), e.deviceType() != c10::DeviceType::CPU, e.startThreadId(),
                        static_cast<double>(e.startNs()) / 1e3, static_cast<double>(e.durationNs()) / 1e3});
    }
    const std::string stem = cat(run_dir_, "/profile-step", request_.first_step, "-rank", rank_);
    const std::string what = steps_named(request_.first_step, last_recorded_);
    std::string trace_note = cat("Chrome trace: ", stem, ".json");
    try {
      result->save(stem + ".json");
    } catch (const std::exception& e) {
      // Debian's LibTorch has no Kineto and says so here; keep the first line, not the backtrace.
      const std::string why = e.what();
      trace_note = cat("no Chrome trace: ", why.substr(0, why.find('\n')));
    }
    const std::string title = cat("profile of ", what, ", rank ", rank_, " on ", compat::device_name(device_),
                                  request_.host ? "" : " (device only)", "; ", trace_note);
    std::ofstream out(stem + ".txt");
    out << summarize_profile(std::move(events), wall_us, title);
    if (!out) throw std::runtime_error(cat("cannot write ", stem, ".txt"));
    summary_path_ = stem + ".txt";
    log_info_here(cat("profile of ", what, " written to ", summary_path_));
  } catch (const std::exception& e) {
    log_warn(cat("profile of ", steps_named(request_.first_step, last_recorded_), " was not written: ", e.what()));
  }
}

}  // namespace topotrain
