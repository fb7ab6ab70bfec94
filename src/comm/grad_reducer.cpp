#include "topotrain/comm/grad_reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <utility>

#include "mpi_types.h"
#include "topotrain/core/error.h"

namespace topotrain::comm {

// Runs after AccumulateGrad has added this micro-batch's gradient into .grad().
class GradReducer::ReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(GradReducer* reducer, std::size_t index) : reducer_(reducer), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    reducer_->mark_ready(index_);
    return outputs;
  }

 private:
  GradReducer* reducer_;
  std::size_t index_;
};

namespace {

std::string describe(const std::string& name, const at::Tensor& tensor) {
  return cat("'", name, "' ", tensor.sizes(), " ", tensor.scalar_type());
}

std::uint64_t fnv1a(const std::string& text, std::uint64_t hash = 1469598103934665603ull) {
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

std::string broadcast_string(const std::string& text, int root, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  unsigned long long length = text.size();
  MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, root, comm);
  std::string result = rank == root ? text : std::string(length, '\0');
  MPI_Bcast(result.data(), static_cast<int>(length), MPI_CHAR, root, comm);
  return result;
}

}  // namespace

GradReducer::GradReducer(NamedParameters parameters, Backend& backend, GradReducerConfig config)
    : backend_(backend) {
  parameters_.reserve(parameters.size());
  for (auto& [name, tensor] : parameters) {
    Parameter parameter;
    parameter.name = std::move(name);
    parameter.tensor = std::move(tensor);
    parameters_.push_back(std::move(parameter));
  }
  // First, so that a rank with bad parameters fails together with the others.
  verify_across_ranks();
  for (const Parameter& p : parameters_) {
    if (!p.tensor.requires_grad() || !p.tensor.is_leaf())
      throw std::invalid_argument(cat("GradReducer: parameter ", describe(p.name, p.tensor),
                                      " is not a leaf that requires grad; leave frozen parameters out"));
    Device device = backend_.device();
    bool on_device = device.is_cpu ? p.tensor.is_cpu() : p.tensor.is_cuda() && p.tensor.get_device() == device.index;
    if (!on_device)
      throw std::invalid_argument(cat("GradReducer: parameter ", describe(p.name, p.tensor), " is on ",
                                      p.tensor.device(), " but the ", backend_.name(), " backend reduces on ",
                                      device.str()));
  }
  assign_buckets(config);
  install_hooks();
  zero_grad();
}

GradReducer::~GradReducer() {
  for (Parameter& p : parameters_)
    if (p.accumulator) p.accumulator->del_post_hook(p.hook_key);
}

// Every rank must bucket the same tensors in the same order, or the all-reduces would
// pair unrelated memory (garbage) or differ in size (a hang). A hash of the whole list
// settles the common case in one allgather; on a difference, the lowest differing rank
// and rank 0 publish the first parameter they disagree on, and every rank throws that.
void GradReducer::verify_across_ranks() const {
  MPI_Comm comm = backend_.control();
  std::vector<std::uint64_t> hashes;
  std::uint64_t all = fnv1a(std::to_string(parameters_.size()));
  for (const Parameter& p : parameters_) {
    hashes.push_back(fnv1a(describe(p.name, p.tensor)));
    all = fnv1a(std::to_string(hashes.back()), all);
  }
  std::vector<std::uint64_t> every(backend_.size());
  detail::mpi_check(MPI_Allgather(&all, 1, MPI_UINT64_T, every.data(), 1, MPI_UINT64_T, comm), "MPI_Allgather");
  bool agree = true;
  for (std::uint64_t h : every) agree = agree && h == every[0];
  if (agree) return;

  unsigned long long first_count = hashes.size();
  MPI_Bcast(&first_count, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
  std::vector<std::uint64_t> first_hashes = hashes;
  first_hashes.resize(first_count);
  MPI_Bcast(first_hashes.data(), static_cast<int>(first_count), MPI_UINT64_T, 0, comm);
  std::size_t index = 0;
  while (index < hashes.size() && index < first_hashes.size() && hashes[index] == first_hashes[index]) ++index;
  bool differs = index < hashes.size() || index < first_hashes.size();
  int mine = differs ? backend_.rank() : backend_.size();
  int culprit = 0;
  MPI_Allreduce(&mine, &culprit, 1, MPI_INT, MPI_MIN, comm);
  unsigned long long at = index;
  MPI_Bcast(&at, 1, MPI_UNSIGNED_LONG_LONG, culprit, comm);
  auto entry = [&](std::size_t i) {
    return i < parameters_.size() ? describe(parameters_[i].name, parameters_[i].tensor) : std::string("nothing");
  };
  std::string theirs = broadcast_string(entry(at), culprit, comm);
  std::string reference = broadcast_string(entry(at), 0, comm);
  throw std::runtime_error(cat("GradReducer: ranks register different parameters: parameter #", at, " is ", theirs,
                               " on rank ", culprit, " of the ", backend_.name(), " group but ", reference,
                               " on rank 0; every rank must register the same parameters in the same order"));
}

// Reverse registration order approximates the order in which backward produces
// gradients, so early buckets fill (and launch) while backward is still running.
void GradReducer::assign_buckets(const GradReducerConfig& config) {
  auto limit_bytes = [](double mb) { return static_cast<std::int64_t>(mb * 1024 * 1024); };
  std::map<at::ScalarType, std::size_t> open;  // dtype -> index of its bucket being filled
  std::map<at::ScalarType, std::int64_t> open_bytes;
  std::map<at::ScalarType, int> closed;
  for (std::size_t i = parameters_.size(); i-- > 0;) {
    at::ScalarType dtype = parameters_[i].tensor.scalar_type();
    if (!open.count(dtype)) {
      open[dtype] = buckets_.size();
      open_bytes[dtype] = 0;
      buckets_.push_back(Bucket{dtype, {}, {}, 0, nullptr});
    }
    buckets_[open[dtype]].members.push_back(i);
    open_bytes[dtype] += static_cast<std::int64_t>(parameters_[i].tensor.nbytes());
    std::int64_t limit = limit_bytes(closed[dtype] == 0 ? config.first_bucket_mb : config.bucket_mb);
    if (open_bytes[dtype] >= limit) {
      open.erase(dtype);
      ++closed[dtype];
    }
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    std::int64_t numel = 0;
    for (std::size_t i : bucket.members) numel += parameters_[i].tensor.numel();
    bucket.flat = at::zeros({numel}, parameters_[bucket.members.front()].tensor.options().requires_grad(false));
    std::int64_t offset = 0;
    for (std::size_t i : bucket.members) {
      Parameter& p = parameters_[i];
      p.bucket = b;
      p.view = bucket.flat.narrow(0, offset, p.tensor.numel()).view(p.tensor.sizes());
      offset += p.tensor.numel();
    }
  }
}

void GradReducer::install_hooks() {
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    Parameter& p = parameters_[i];
    p.accumulator = torch::autograd::impl::grad_accumulator(p.tensor);
    p.hook_key = p.accumulator->add_post_hook(std::make_unique<ReadyHook>(this, i));
  }
}

std::vector<std::vector<std::string>> GradReducer::bucket_layout() const {
  std::vector<std::vector<std::string>> layout;
  for (const Bucket& bucket : buckets_) {
    layout.emplace_back();
    for (std::size_t i : bucket.members) layout.back().push_back(parameters_[i].name);
  }
  return layout;
}

void GradReducer::zero_grad() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (reducing_) throw std::logic_error("GradReducer::zero_grad inside the last micro-batch; call finish() first");
  for (Bucket& bucket : buckets_) bucket.flat.zero_();
  for (Parameter& p : parameters_) p.tensor.mutable_grad() = p.view;
}

void GradReducer::begin_micro_batch(bool last) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (reducing_)
    throw std::logic_error("GradReducer::begin_micro_batch after the last micro-batch of the step; call finish() first");
  if (!step_open_) {
    step_open_ = true;
    collectives_ = 0;
    bytes_ = 0;
    device_spans_.clear();
  }
  if (!last) return;
  reducing_ = true;
  next_bucket_ = 0;
  for (Parameter& p : parameters_) p.ready = false;
  for (Bucket& bucket : buckets_) bucket.pending = bucket.members.size();
}

void GradReducer::mark_ready(std::size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!reducing_) return;  // an accumulation micro-batch: nothing to do
  mark_ready_locked(index);
}

void GradReducer::mark_ready_locked(std::size_t index) {
  Parameter& p = parameters_[index];
  // A second gradient would land in a bucket that may already be on the wire.
  if (p.ready)
    throw std::logic_error(cat("GradReducer: parameter ", describe(p.name, p.tensor),
                               " received a second gradient in the last micro-batch; run backward once per micro-batch"));
  bind_grad(p);
  p.ready = true;
  if (--buckets_[p.bucket].pending == 0) launch_in_order();
}

void GradReducer::bind_grad(Parameter& p) const {
  at::Tensor& grad = p.tensor.mutable_grad();
  if (!grad.defined()) {
    p.view.zero_();
  } else if (grad.data_ptr() != p.view.data_ptr()) {
    p.view.copy_(grad);
  } else {
    return;
  }
  grad = p.view;
}

void GradReducer::launch_in_order() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& bucket = buckets_[next_bucket_++];
    bucket.work = backend_.all_reduce_async(bucket.flat, ReduceOp::sum);
    ++collectives_;
    bytes_ += static_cast<std::int64_t>(bucket.flat.nbytes());
  }
}

DeviceSpans GradReducer::take_device_spans() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(device_spans_, {});
}

void GradReducer::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!reducing_) throw std::logic_error("GradReducer::finish without begin_micro_batch(last=true)");
  // Parameters that got no gradient in the last micro-batch (an expert no token was
  // routed to) still belong to their bucket: their accumulated value (or zero) is reduced.
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    if (!parameters_[i].ready) mark_ready_locked(i);
  for (Bucket& bucket : buckets_) {
    bucket.work->wait();
    if (std::optional<DeviceSpan> span = bucket.work->take_device_span()) device_spans_.push_back(std::move(*span));
    bucket.work.reset();
  }
  reducing_ = false;
  step_open_ = false;
}

}  // namespace topotrain::comm
