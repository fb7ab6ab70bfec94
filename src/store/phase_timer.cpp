#include "topotrain/store/phase_timer.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include <ATen/record_function.h>

namespace topotrain {
namespace {

double seconds(PhaseTimer::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

#ifdef TOPOTRAIN_CUDA
void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("phase timer: ") + what + ": " + cudaGetErrorString(status));
}
#endif

using Pieces = std::vector<std::pair<double, double>>;  // [begin, end) in seconds

// Sorted, disjoint pieces covering the same time as `pieces`.
Pieces merged(Pieces pieces) {
  std::sort(pieces.begin(), pieces.end());
  Pieces out;
  for (const auto& piece : pieces) {
    if (!out.empty() && piece.first <= out.back().second)
      out.back().second = std::max(out.back().second, piece.second);
    else
      out.push_back(piece);
  }
  return out;
}

double length(const Pieces& pieces) {
  double sum = 0;
  for (const auto& [begin, end] : pieces) sum += end - begin;
  return sum;
}

// Time covered by both; each argument sorted and disjoint.
double intersection(const Pieces& a, const Pieces& b) {
  double sum = 0;
  for (std::size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    sum += std::max(0.0, std::min(a[i].second, b[j].second) - std::max(a[i].first, b[j].first));
    (a[i].second < b[j].second ? i : j) += 1;
  }
  return sum;
}

// Files a step's device spans (all read on one timeline) into its record.
void add_device_spans(StepRecord& record, const std::vector<PhaseSpan>& spans) {
  Pieces all, comm, backward;
  double total = 0;
  for (const PhaseSpan& span : spans) {
    record.phase_seconds[static_cast<std::size_t>(span.phase)] += span.seconds;
    record.spans.push_back(span);
    const std::pair<double, double> piece{span.start, span.start + span.seconds};
    all.push_back(piece);
    if (span.phase == Phase::comm_wait) comm.push_back(piece);
    if (span.phase == Phase::backward) backward.push_back(piece);
    total += span.seconds;
  }
  record.overlap_seconds += std::max(0.0, total - length(merged(std::move(all))));
  record.comm_overlap_seconds += intersection(merged(std::move(comm)), merged(std::move(backward)));
}

}  // namespace

double StepRecord::named_seconds() const { return std::accumulate(phase_seconds.begin(), phase_seconds.end(), 0.0); }

PhaseTimer::~PhaseTimer() {
#ifdef TOPOTRAIN_CUDA
  for (auto& step : pending_) {
    free_events_.push_back(step.anchor.event);
    for (auto& scope : step.scopes) {
      free_events_.push_back(scope.begin);
      free_events_.push_back(scope.end);
    }
  }
  if (anchor_.event) free_events_.push_back(anchor_.event);
  for (auto& scope : gpu_scopes_) {
    free_events_.push_back(scope.begin);
    free_events_.push_back(scope.end);
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

namespace {

// "phase:data_wait", ...: the profiler keeps the name's pointer, so the names live as long as
// the program.
const char* profiler_range_name(Phase phase) {
  static const auto names = [] {
    std::array<std::string, kPhaseCount> built;
    for (std::size_t i = 0; i < kPhaseCount; ++i) built[i] = std::string("phase:") + phase_names()[i];
    return built;
  }();
  return names[static_cast<std::size_t>(phase)].c_str();
}

}  // namespace

PhaseTimer::Scope::Scope(PhaseTimer* timer, int index, Phase phase) : timer_(timer), index_(index) {
  auto range = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (range->isActive()) {
    range->before(profiler_range_name(phase));
    profiler_range_ = std::move(range);
  }
}

PhaseTimer::Scope::Scope(Scope&& other) noexcept
    : timer_(other.timer_), index_(other.index_), profiler_range_(std::move(other.profiler_range_)) {
  other.timer_ = nullptr;
}

PhaseTimer::Scope::~Scope() {
  if (timer_) timer_->close(index_);
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
  return Scope(this, static_cast<int>(open_.size()) - 1, phase);
}

void PhaseTimer::add_gpu_spans(Phase phase, DeviceSpans spans) {
  if (!in_step_) throw std::logic_error(std::string("PhaseTimer::add_gpu_spans(") + phase_name(phase) + ") outside a step");
  for (DeviceSpan& span : spans) {
#ifdef TOPOTRAIN_CUDA
    anchor_on(span.stream());
#endif
    added_.push_back({phase, std::move(span)});
  }
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
  if (anchor_.event) {
    pending_.push_back({std::move(current_), anchor_, std::move(gpu_scopes_), std::move(added_)});
    anchor_ = Anchor{};
    gpu_scopes_.clear();
    added_.clear();
    return;
  }
#else
  // Host-clock spans are known at once.
  std::vector<PhaseSpan> spans;
  for (const AddedSpan& added : added_)
    spans.push_back({added.phase, seconds_since_epoch(added.span.begin_time()),
                     seconds(added.span.end_time() - added.span.begin_time()), true});
  add_device_spans(current_, spans);
  added_.clear();
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
  added_.clear();
#ifdef TOPOTRAIN_CUDA
  // Its GPU scopes were recorded on their streams; the events are reused once those are done.
  if (anchor_.event) free_events_.push_back(anchor_.event);
  for (const GpuScope& scope : gpu_scopes_) {
    free_events_.push_back(scope.begin);
    free_events_.push_back(scope.end);
  }
  anchor_ = Anchor{};
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

void PhaseTimer::anchor_on(cudaStream_t stream) {
  if (anchor_.event) return;
  anchor_ = Anchor{take_event(), seconds_since_epoch(Clock::now())};
  cuda_check(cudaEventRecord(anchor_.event, stream), "cudaEventRecord");
}

PhaseTimer::Scope PhaseTimer::scope(Phase phase, cudaStream_t stream) {
  if (!in_step_) throw std::logic_error(std::string("PhaseTimer::scope(") + phase_name(phase) + ") outside a step");
  anchor_on(stream);
  GpuScope scope{phase, stream, take_event(), take_event()};
  cuda_check(cudaEventRecord(scope.begin, stream), "cudaEventRecord");
  gpu_scopes_.push_back(scope);
  return Scope(this, -static_cast<int>(gpu_scopes_.size()), phase);
}

void PhaseTimer::resolve(PendingStep& step) {
  // Offsets from the anchor are negative for work enqueued before it on another stream
  // (a step's batch copies).
  cuda_check(cudaEventSynchronize(step.anchor.event), "cudaEventSynchronize");
  std::vector<PhaseSpan> spans;
  auto read = [&](Phase phase, cudaEvent_t begin, cudaEvent_t end) {
    cuda_check(cudaEventSynchronize(end), "cudaEventSynchronize");
    float ms = 0, offset_ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
    cuda_check(cudaEventElapsedTime(&offset_ms, step.anchor.event, begin), "cudaEventElapsedTime");
    spans.push_back({phase, step.anchor.time + offset_ms * 1e-3, ms * 1e-3, true});
  };
  for (const GpuScope& scope : step.scopes) {
    read(scope.phase, scope.begin, scope.end);
    free_events_.push_back(scope.begin);
    free_events_.push_back(scope.end);
  }
  for (const AddedSpan& added : step.added) read(added.phase, added.span.begin_event(), added.span.end_event());
  free_events_.push_back(step.anchor.event);
  step.scopes.clear();
  step.added.clear();
  step.anchor = Anchor{};
  add_device_spans(step.record, spans);
}
#endif

}  // namespace topotrain
