// Data-parallel gradient reduction in flat buckets, overlapped with backward, skipped on
// accumulation micro-batches (after the design of PyTorch's DDP reducer).
//
// Usage per optimizer step with N micro-batches:
//
//   reducer.zero_grad();
//   for (m = 0; m < N; ++m) {
//     reducer.begin_micro_batch(/*last=*/m == N - 1);
//     (loss_m / global_tokens).backward();   // global_tokens: over all ranks and micro-batches
//   }
//   reducer.finish();                        // every rank now holds the summed gradient
//   timer.add_gpu_spans(Phase::comm_wait, reducer.take_device_spans());  // optional
//   optimizer.step();
//
// The reducer SUMS. Dividing each rank's loss by the token count of the whole optimizer
// step (all ranks, all micro-batches) makes the sum equal the gradient one process would
// compute for the token-weighted mean loss over the union of the micro-batches.
//
// Invariants:
// * Every parameter's .grad() is a view into its bucket, so accumulation over
//   micro-batches writes straight into the buckets and reduction needs no copy. Code that
//   replaces a .grad() (an optimizer's zero_grad with set_to_none) is tolerated: the
//   gradient is copied back into the bucket and the view restored before reducing.
// * Buckets launch strictly in bucket order (bucket k only after buckets 0..k-1), which is
//   the same on every rank, whatever order autograd finishes parameters in.
// * Only the last micro-batch of a step reduces: hooks on earlier ones do nothing.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "topotrain/comm/backend.h"

namespace torch::autograd {
struct Node;
}

namespace topotrain::comm {

struct GradReducerConfig {
  double first_bucket_mb = 1.0;  // small, so that the first all-reduce starts early in backward
  double bucket_mb = 25.0;       // train.bucket_mb
};

class GradReducer {
 public:
  using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

  // Collective over the backend's group. Checks that every rank registers the same
  // parameters (names, shapes, dtypes, order) and throws std::runtime_error naming the
  // first difference otherwise, on every rank. Parameters must require grad, be leaves
  // and live on the backend's device.
  GradReducer(NamedParameters parameters, Backend& backend, GradReducerConfig config = {});
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Call before each micro-batch's backward; `last` = this one completes the optimizer
  // step and reduces. The first call of a step resets the counters.
  void begin_micro_batch(bool last);
  // After the last micro-batch's backward: launches the buckets that are not launched
  // yet (parameters that got no gradient keep what earlier micro-batches accumulated, or
  // zeros) and waits for all of them.
  void finish();
  // Zeroes every bucket and points each .grad() at its bucket view.
  void zero_grad();

  // Of the current (or just finished) optimizer step.
  std::int64_t collectives() const { return collectives_; }
  std::int64_t bytes() const { return bytes_; }
  // The device time of the just finished step's all-reduces, one span per bucket on the
  // stream it ran on, moved out; empty unless the backend times collectives
  // (Backend::time_collectives: NCCL). Spans not taken are dropped when the next step begins.
  DeviceSpans take_device_spans();

  std::size_t bucket_count() const { return buckets_.size(); }
  // Parameter names per bucket, in launch order.
  std::vector<std::vector<std::string>> bucket_layout() const;

 private:
  struct Parameter {
    std::string name;
    at::Tensor tensor;
    at::Tensor view;  // its slice of the bucket, shaped like the parameter
    std::size_t bucket = 0;
    bool ready = false;
    std::shared_ptr<torch::autograd::Node> accumulator;  // kept alive, or autograd drops our hook
    std::uintptr_t hook_key = 0;
  };
  struct Bucket {
    at::ScalarType dtype;
    std::vector<std::size_t> members;
    at::Tensor flat;
    std::size_t pending = 0;  // members not ready yet in the reducing micro-batch
    std::unique_ptr<Work> work;
  };
  class ReadyHook;

  void verify_across_ranks() const;
  void assign_buckets(const GradReducerConfig& config);
  void install_hooks();
  void mark_ready(std::size_t index);          // from autograd; takes the lock
  void mark_ready_locked(std::size_t index);
  void bind_grad(Parameter& parameter) const;  // ensures .grad() is the bucket view
  void launch_in_order();

  std::vector<Parameter> parameters_;
  std::vector<Bucket> buckets_;
  Backend& backend_;
  std::mutex mutex_;
  bool reducing_ = false;     // inside the last micro-batch of a step, before finish()
  bool step_open_ = false;    // between the first begin_micro_batch of a step and finish()
  std::size_t next_bucket_ = 0;
  std::int64_t collectives_ = 0;
  std::int64_t bytes_ = 0;
  DeviceSpans device_spans_;
};

}  // namespace topotrain::comm
