#include "topotrain/store/phase_timer.h"

#include <numeric>
#include <stdexcept>
#include <string>

namespace topotrain {
namespace {

double seconds(PhaseTimer::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

#ifdef TOPOTRAIN_CUDA
void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("phase timer: ") + what + ": " + cudaGetErrorString(status));
}
#endif

}  // namespace

double StepRecord::named_seconds() const { return std::accumulate(phase_seconds.begin(), phase_seconds.end(), 0.0); }

PhaseTimer::~PhaseTimer() {
#ifdef TOPOTRAIN_CUDA
  for (auto& step : pending_) {
    for (auto& anchor : step.anchors) free_events_.push_back(anchor.event);
    for (auto& scope : step.scopes) {
      free_events_.push_back(scope.begin);
      free_events_.push_back(scope.end);
    }
  }
  for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
#endif
}

void PhaseTimer::begin_step(std::int64_t step) {
  if (in_step_) throw std::logic_error("PhaseTimer::begin_step: step " + std::to_string(current_.step) + " was not ended");
  step_begin_ = Clock::now();
  in_step_ = true;
  current_ = StepRecord{};
  current_.step = step;
  current_.start = seconds_since_epoch(step_begin_);
}

PhaseTimer::Scope PhaseTimer::scope(Phase phase) {
  if (!in_step_) throw std::logic_error(std::string("PhaseTimer::scope(") + phase_name(phase) + ") outside a step");
  const Clock::time_point now = Clock::now();
  if (!open_.empty()) {
    // Exclusive times: the outer phase stops counting while the inner one runs.
    OpenScope& outer = open_.back();
    current_.phase_seconds[static_cast<std::size_t>(outer.phase)] += seconds(now - outer.resumed);
  }
  open_.push_back({phase, now, now});
  return Scope(this, static_cast<int>(open_.size()) - 1);
}

void PhaseTimer::close(int index) {
#ifdef TOPOTRAIN_CUDA
  if (index < 0) {
    GpuScope& scope = gpu_scopes_[static_cast<std::size_t>(-(index + 1))];
    cuda_check(cudaEventRecord(scope.end, scope.stream), "cudaEventRecord");
    return;
  }
#endif
  // Scopes are RAII objects, so they close innermost first; a moved-out scope that
  // outlives its successor would break that, and is a bug in the caller.
  if (index != static_cast<int>(open_.size()) - 1) throw std::logic_error("PhaseTimer: scopes closed out of order");
  const Clock::time_point now = Clock::now();
  const OpenScope closed = open_.back();
  open_.pop_back();
  current_.phase_seconds[static_cast<std::size_t>(closed.phase)] += seconds(now - closed.resumed);
  current_.spans.push_back({closed.phase, seconds_since_epoch(closed.opened), seconds(now - closed.opened), false});
  if (!open_.empty()) open_.back().resumed = now;
}

void PhaseTimer::end_step(StepMetrics metrics) {
  if (!in_step_) throw std::logic_error("PhaseTimer::end_step without begin_step");
  if (!open_.empty())
    throw std::logic_error(std::string("PhaseTimer::end_step: phase ") + phase_name(open_.back().phase) + " is still open");
  current_.wall = seconds(Clock::now() - step_begin_);
  current_.metrics = std::move(metrics);
  in_step_ = false;
#ifdef TOPOTRAIN_CUDA
  // The previous steps' kernels are done (or nearly) by now: reading their events here
  // costs at most a short wait, never a stall of the stream.
  finish();
  if (!gpu_scopes_.empty()) {
    pending_.push_back({std::move(current_), std::move(anchors_), std::move(gpu_scopes_)});
    anchors_.clear();
    gpu_scopes_.clear();
    return;
  }
#endif
  finished_.push_back(std::move(current_));
}

void PhaseTimer::discard_step() {
  if (!in_step_) throw std::logic_error("PhaseTimer::discard_step without begin_step");
  if (!open_.empty())
    throw std::logic_error(std::string("PhaseTimer::discard_step: phase ") + phase_name(open_.back().phase) +
                           " is still open");
  in_step_ = false;
  current_ = StepRecord{};
#ifdef TOPOTRAIN_CUDA
  // Its GPU scopes were recorded on their streams; the events are reused once those are done.
  for (const StreamAnchor& anchor : anchors_) free_events_.push_back(anchor.event);
  for (const GpuScope& scope : gpu_scopes_) {
    free_events_.push_back(scope.begin);
    free_events_.push_back(scope.end);
  }
  anchors_.clear();
  gpu_scopes_.clear();
#endif
}

std::vector<StepRecord> PhaseTimer::take_finished() {
  std::vector<StepRecord> out;
  out.swap(finished_);
  return out;
}

void PhaseTimer::finish() {
#ifdef TOPOTRAIN_CUDA
  while (!pending_.empty()) {
    resolve(pending_.front());
    finished_.push_back(std::move(pending_.front().record));
    pending_.pop_front();
  }
#endif
}

#ifdef TOPOTRAIN_CUDA
cudaEvent_t PhaseTimer::take_event() {
  if (!free_events_.empty()) {
    cudaEvent_t event = free_events_.back();
    free_events_.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  cuda_check(cudaEventCreate(&event), "cudaEventCreate");
  return event;
}

PhaseTimer::Scope PhaseTimer::scope(Phase phase, cudaStream_t stream) {
  if (!in_step_) throw std::logic_error(std::string("PhaseTimer::scope(") + phase_name(phase) + ") outside a step");
  std::size_t anchor = 0;
  while (anchor < anchors_.size() && anchors_[anchor].stream != stream) ++anchor;
  if (anchor == anchors_.size()) {
    // Maps this stream's event clock onto the CPU clock for the trace's span starts.
    StreamAnchor a{stream, take_event(), seconds_since_epoch(Clock::now())};
    cuda_check(cudaEventRecord(a.event, stream), "cudaEventRecord");
    anchors_.push_back(a);
  }
  GpuScope scope{phase, stream, take_event(), take_event(), anchor};
  cuda_check(cudaEventRecord(scope.begin, stream), "cudaEventRecord");
  gpu_scopes_.push_back(scope);
  return Scope(this, -static_cast<int>(gpu_scopes_.size()));
}

void PhaseTimer::resolve(PendingStep& step) {
  for (const GpuScope& scope : step.scopes) {
    cuda_check(cudaEventSynchronize(scope.end), "cudaEventSynchronize");
    float ms = 0, offset_ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, scope.begin, scope.end), "cudaEventElapsedTime");
    const StreamAnchor& anchor = step.anchors[scope.anchor];
    cuda_check(cudaEventElapsedTime(&offset_ms, anchor.event, scope.begin), "cudaEventElapsedTime");
    step.record.phase_seconds[static_cast<std::size_t>(scope.phase)] += ms * 1e-3;
    step.record.spans.push_back({scope.phase, anchor.time + offset_ms * 1e-3, ms * 1e-3, true});
    free_events_.push_back(scope.begin);
    free_events_.push_back(scope.end);
  }
  for (const StreamAnchor& anchor : step.anchors) free_events_.push_back(anchor.event);
  step.scopes.clear();
  step.anchors.clear();
}
#endif

}  // namespace topotrain
