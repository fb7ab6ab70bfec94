#include "topotrain/train/budget_probe.h"

#include <ATen/CPUGeneratorImpl.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include "topotrain/batch/packed_batch.h"
#include "topotrain/comm/watchdog.h"
#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/core/process_memory.h"
#include "topotrain/model/lm_loss.h"
#include "topotrain/torch_compat.h"
#include "topotrain/train/job_exit.h"
#include "topotrain/train/out_of_memory.h"

namespace topotrain {
namespace {

std::int64_t round_down(std::int64_t budget, std::int64_t granule) {
  return budget >= granule ? budget / granule * granule : budget;
}

// "312.4 MiB", "1.25 GiB".
std::string bytes_text(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (std::abs(bytes) < (std::int64_t{1} << 30)) return cat(fixed_point(b / double(1 << 20), 1), " MiB");
  return cat(fixed_point(b / double(1 << 30), 2), " GiB");
}

// The device's memory one rank may plan with: the GPU's, or on CPU the machine's RAM
// shared by the ranks on it.
std::int64_t device_capacity_bytes(const torch::Device& device, int ranks_on_machine) {
  if (device.is_cuda()) return compat::device_total_bytes(device.index());
  return physical_memory_bytes() / std::max(1, ranks_on_machine);
}

// Memory of this rank against its capacity. On CUDA: what torch's allocator reserves
// (fragmentation included), plus what the device holds outside it, counted once when the
// meter is made (the CUDA context, libraries' workspaces, other processes sharing the GPU).
// On CPU: the process's resident set.
class PeakMeter {
 public:
  explicit PeakMeter(const torch::Device& device)
      : device_(device),
        outside_torch_(device.is_cuda() ? std::max<std::int64_t>(0, compat::device_used_bytes() - reserved(false)) : 0) {}
  std::int64_t now() const { return device_.is_cuda() ? reserved(false) + outside_torch_ : resident_set_bytes(); }
  void reset() {
    if (device_.is_cuda()) {
      compat::reset_peak_allocated_bytes(device_);
      return;
    }
#ifdef __GLIBC__
    // Freed activations go back to the system, so that what a larger candidate left cached
    // in the heap does not count in the next, smaller one's peak.
    malloc_trim(0);
#endif
    if (!reset_peak_resident_set())
      throw ConfigError("train.token_budget = \"auto\" measures a CPU rank's peak resident set, which needs a "
                        "writable /proc/self/clear_refs (Linux): set train.token_budget to a number of tokens");
  }
  std::int64_t peak() const { return device_.is_cuda() ? reserved(true) + outside_torch_ : peak_resident_set_bytes(); }

 private:
  std::int64_t reserved(bool peak) const {
    return compat::allocator_bytes(device_, compat::AllocatorBytes::reserved, peak);
  }

  torch::Device device_;
  std::int64_t outside_torch_;
};

// Whatever training draws from torch's CPU generator must not depend on whether the probe
// ran: it is put back where it stood, also when the probe throws.
class RestoresCpuGenerator {
 public:
  RestoresCpuGenerator() : generator_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    state_ = generator_.get_state();
  }
  ~RestoresCpuGenerator() {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(state_);
  }
  RestoresCpuGenerator(const RestoresCpuGenerator&) = delete;
  RestoresCpuGenerator& operator=(const RestoresCpuGenerator&) = delete;

 private:
  at::Generator generator_;
  torch::Tensor state_;
};

// The packer's worst micro-batch at `budget`: sequences as long as the longest sample
// allows (a longer one is split or truncated to the budget), filling the budget; attention
// grows with the square of a sequence's length where it is not a flash kernel.
PackedBatch worst_case_batch(std::int64_t budget, std::int64_t longest_sample, std::int64_t vocab_size,
                             std::mt19937_64& ids) {
  std::uniform_int_distribution<std::int64_t> id(0, vocab_size - 1);
  const std::int64_t length = std::max<std::int64_t>(1, std::min(budget, longest_sample));
  std::vector<std::vector<std::int64_t>> sequences;
  for (std::int64_t left = budget; left > 0; left -= length) {
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(std::min(left, length)));
    for (auto& token : tokens) token = id(ids);
    sequences.push_back(std::move(tokens));
  }
  return PackedBatch::from_documents(sequences);
}

void drop_gradients(model::Qwen3CausalLMImpl& net) {
  for (auto& p : net.parameters()) p.mutable_grad() = torch::Tensor();
}

// This rank's peak over forward and backward at `budget`; nullopt after an out-of-memory.
std::optional<std::int64_t> measure(model::Qwen3CausalLMImpl& net, std::int64_t budget, std::int64_t longest_sample,
                                    const torch::Device& device, PeakMeter& meter, std::mt19937_64& ids) {
  const PackedBatch batch = worst_case_batch(budget, longest_sample, net.config().vocab_size, ids).to(device);
  std::optional<std::int64_t> peak;
  meter.reset();
  try {
    model::BackboneOutput out = net.forward_backbone(batch);
    model::LmLoss lm = model::lm_loss(net, out.hidden, batch);
    (lm.loss_sum + out.aux_loss * net.config().router_aux_loss_coef).backward();
    compat::synchronize(device);
    peak = meter.peak();
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
  }
  drop_gradients(net);
  compat::release_cached_memory(device);
  return peak;
}

}  // namespace

BudgetSearch search_token_budget(const std::function<bool(std::int64_t)>& fits, std::int64_t max_budget,
                                 std::int64_t granule) {
  BudgetSearch search;
  auto probe = [&](std::int64_t budget) {
    ++search.probes;
    return fits(budget);
  };
  const std::int64_t top = round_down(max_budget, granule);
  std::int64_t fit = 0, miss = 0;  // miss 0: none seen yet
  for (std::int64_t candidate = std::min(granule, top); candidate > fit;
       candidate = std::min(top, candidate * 2)) {
    if (!probe(candidate)) {
      miss = candidate;
      break;
    }
    fit = candidate;
  }
  if (fit == 0) return search;
  // Between the last fit and the first miss, in multiples of `granule`.
  while (miss != 0 && miss - fit > granule) {
    const std::int64_t middle = fit + (miss - fit) / granule / 2 * granule;
    (probe(middle) ? fit : miss) = middle;
  }
  search.budget = fit;
  return search;
}

double MeasuredBudget::bytes_per_token() const {
  return budget > 0 ? static_cast<double>(peak_bytes - fixed_bytes) / static_cast<double>(budget) : 0.0;
}

std::optional<std::int64_t> MeasuredBudget::after_out_of_memory(std::int64_t token_budget,
                                                                std::int64_t failing_peak_bytes) const {
  if (token_budget <= 1) return std::nullopt;
  double scale = 0.9;
  if (failing_peak_bytes > fixed_bytes && planned_bytes > fixed_bytes)
    scale = std::min(scale, static_cast<double>(planned_bytes - fixed_bytes) /
                                static_cast<double>(failing_peak_bytes - fixed_bytes));
  const auto shrunk = static_cast<std::int64_t>(static_cast<double>(token_budget) * scale);
  return std::max<std::int64_t>(1, round_down(shrunk, kBudgetGranule));
}

std::string MeasuredBudget::describe() const {
  return cat("train.token_budget = \"auto\": ", budget, " tokens per micro-batch; measured peak ",
             bytes_text(peak_bytes), " (", bytes_text(fixed_bytes), " before the micro-batch + ",
             fixed_point(bytes_per_token() / 1024.0, 1), " KiB per token) of ", bytes_text(planned_bytes),
             " planned, capacity ", bytes_text(capacity_bytes), ", headroom ", bytes_text(capacity_bytes - peak_bytes),
             "; ", probes, " probes in ", fixed_point(seconds, 2), " s");
}

MeasuredBudget probe_token_budget(model::Qwen3CausalLMImpl& net, const StepConfig& step, std::int64_t max_budget,
                                  std::int64_t longest_sample, const torch::Device& device, int ranks_on_machine,
                                  MPI_Comm group) {
  const auto started = std::chrono::steady_clock::now();
  MeasuredBudget measured;
  measured.capacity_bytes = step.memory_limit > 0 ? step.memory_limit : device_capacity_bytes(device, ranks_on_machine);
  measured.planned_bytes = static_cast<std::int64_t>(step.memory_fraction * static_cast<double>(measured.capacity_bytes));
  // AdamW keeps exp_avg and exp_avg_sq like each master parameter, allocated by the session.
  std::int64_t optimizer_bytes = 0;
  for (const auto& p : net.parameters()) optimizer_bytes += 2 * static_cast<std::int64_t>(p.nbytes());

  const RestoresCpuGenerator restores_generator;
  std::mt19937_64 ids(step.seed);
  PeakMeter meter(device);
  meter.reset();
  measured.fixed_bytes = meter.now() + optimizer_bytes;
  std::map<std::int64_t, std::int64_t> peaks;  // budget -> peak, of the fits
  // A CPU rank cannot survive a candidate that overruns the machine's RAM: one whose peak,
  // grown from the largest fit so far as attention's scores grow (the number of sequences
  // times the square of their length), would pass the capacity is a miss without running.
  auto beyond_capacity = [&](std::int64_t budget) {
    if (device.is_cuda() || peaks.empty()) return false;
    const auto& [fit, peak] = *peaks.rbegin();
    const auto sequence = [&](std::int64_t b) {
      return static_cast<double>(std::max<std::int64_t>(1, std::min(b, longest_sample)));
    };
    const double growth = static_cast<double>(budget) / static_cast<double>(fit) * sequence(budget) / sequence(fit);
    return static_cast<double>(measured.fixed_bytes) + static_cast<double>(peak - measured.fixed_bytes) * growth >
           static_cast<double>(measured.capacity_bytes);
  };
  auto peak_at = [&](std::int64_t budget) -> std::optional<std::int64_t> {
    const std::optional<std::int64_t> peak = measure(net, budget, longest_sample, device, meter, ids);
    if (peak) return *peak + optimizer_bytes;
    return std::nullopt;
  };
  const BudgetSearch search = search_token_budget(
      [&](std::int64_t budget) {
        if (beyond_capacity(budget)) return false;
        const std::optional<std::int64_t> peak = peak_at(budget);
        if (!peak || *peak > measured.planned_bytes) return false;
        peaks[budget] = *peak;
        return true;
      },
      std::max<std::int64_t>(1, max_budget));
  measured.probes = search.probes;

  // One all-reduce: the smallest budget and plan, the largest fixed bytes (negated).
  std::int64_t agree[3] = {search.budget, measured.planned_bytes, -measured.fixed_bytes};
  comm::all_reduce_in_place(agree, 3, MPI_INT64_T, MPI_MIN, group, "the automatic token budget");
  const std::int64_t agreed = agree[0];
  if (agreed == 0)
    throw JobExit(2, cat("train.token_budget = \"auto\": not even a micro-batch of ",
                         std::min(kBudgetGranule, max_budget), " tokens fits train.memory_fraction = ",
                         step.memory_fraction, " of ", bytes_text(measured.capacity_bytes),
                         step.memory_limit > 0 ? " (train.memory_limit)" : "", " on one of the ranks (the fullest "
                         "holds ", bytes_text(-agree[2]), " before any micro-batch): raise train.memory_limit or "
                         "train.memory_fraction, or train a smaller model"));
  measured.budget = agreed;
  measured.planned_bytes = agree[1];
  measured.fixed_bytes = -agree[2];
  // A rank that fits more than the group agreed on measures the agreed budget once more.
  if (!peaks.count(agreed)) ++measured.probes;
  const auto peak = peaks.count(agreed) ? std::optional<std::int64_t>(peaks[agreed]) : peak_at(agreed);
  measured.peak_bytes = peak.value_or(measured.fixed_bytes);
  measured.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return measured;
}

}  // namespace topotrain
