#include "topotrain/train/budget_probe.h"

#include <ATen/CPUGeneratorImpl.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include "topotrain/batch/packed_batch.h"
#include "topotrain/comm/device_sharers.h"
#include "topotrain/comm/watchdog.h"
#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/core/process_memory.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/model/lm_loss.h"
#include "topotrain/torch_compat.h"
#include "topotrain/train/job_exit.h"
#include "topotrain/train/out_of_memory.h"

namespace topotrain {
namespace {

std::int64_t round_down(std::int64_t budget, std::int64_t granule) {
  return budget >= granule ? budget / granule * granule : budget;
}

// The memory one rank may plan with: train.memory_limit, else its share of its GPU's or,
// on CPU, of its node's RAM.
std::int64_t capacity_bytes(const StepConfig& step, const torch::Device& device, int sharers) {
  if (step.memory_limit > 0) return step.memory_limit;
  const std::int64_t whole = device.is_cuda() ? compat::device_total_bytes(device.index()) : physical_memory_bytes();
  return whole / std::max(1, sharers);
}

// What the device holds outside torch's allocator (the CUDA contexts, libraries' workspaces,
// other processes): this rank's share of it among the ranks on its GPU; 0 on CPU.
// Collective over `sharers`, which allocate nothing meanwhile.
std::int64_t outside_torch_share(const torch::Device& device, const comm::DeviceSharers& sharers) {
  if (!device.is_cuda()) return 0;
  sharers.barrier();
  const std::int64_t reserved = sharers.sum(compat::allocator_bytes(device, compat::AllocatorBytes::reserved, false));
  const std::int64_t used = compat::device_used_bytes();
  sharers.barrier();
  return std::max<std::int64_t>(0, used - reserved) / sharers.size();
}

// Memory of this rank against its capacity. On CUDA: what torch's allocator reserves
// (fragmentation included), plus this rank's share of what the device holds outside it.
// On CPU: the process's resident set.
class PeakMeter {
 public:
  PeakMeter(const torch::Device& device, std::int64_t outside_torch) : device_(device), outside_torch_(outside_torch) {}
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

// A micro-batch of documents of `lengths`, token ids drawn below `vocab_size`.
PackedBatch synthetic_batch(const std::vector<std::int64_t>& lengths, std::int64_t vocab_size, std::mt19937_64& ids) {
  std::uniform_int_distribution<std::int64_t> id(0, vocab_size - 1);
  std::vector<std::vector<std::int64_t>> sequences;
  for (std::int64_t length : lengths) {
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(length));
    for (auto& token : tokens) token = id(ids);
    sequences.push_back(std::move(tokens));
  }
  return PackedBatch::from_documents(sequences);
}

// This rank's peak over the stage's worst micro-batches at `budget`; nullopt after an
// out-of-memory.
std::optional<std::int64_t> measure(const BudgetStage& stage, const BudgetBounds& bounds, std::int64_t budget,
                                    const torch::Device& device, PeakMeter& meter, std::mt19937_64& draws) {
  std::optional<std::int64_t> largest;
  for (const auto& score : stage.worst_first) {
    const std::vector<std::int64_t> lengths = worst_fill(bounds, budget, score);
    std::optional<std::int64_t> peak;
    meter.reset();
    try {
      stage.run(synthetic_batch(lengths, stage.vocab_size, draws).to(device), draws);
      compat::synchronize(device);
      peak = meter.peak();
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
    }
    for (const torch::Tensor& p : stage.trained) p.mutable_grad() = torch::Tensor();
    compat::release_cached_memory(device);
    if (!peak) return std::nullopt;
    largest = std::max(largest.value_or(0), *peak);
  }
  return largest;
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
  if (token_budget <= kMinTokenBudget) return std::nullopt;
  double scale = 0.9;
  if (failing_peak_bytes > fixed_bytes && planned_bytes > fixed_bytes)
    scale = std::min(scale, static_cast<double>(planned_bytes - fixed_bytes) /
                                static_cast<double>(failing_peak_bytes - fixed_bytes));
  const auto shrunk = static_cast<std::int64_t>(static_cast<double>(token_budget) * scale);
  return std::max(kMinTokenBudget, round_down(shrunk, kBudgetGranule));
}

std::string MeasuredBudget::describe() const {
  // moe_train has one stage; dflash_train's stream has the budget of its smallest.
  const bool one_stage = stage == "trainer";
  return cat("train.token_budget = \"auto\": ", budget, " tokens per micro-batch; ",
             one_stage ? std::string() : cat(stage, "s: "), "measured peak ", format_bytes(peak_bytes), " (",
             format_bytes(fixed_bytes), " before the micro-batch + ",
             fixed_point(bytes_per_token() / 1024.0, 1), " KiB per token) of ", format_bytes(planned_bytes),
             " planned, capacity ", format_bytes(capacity_bytes), ", headroom ", format_bytes(capacity_bytes - peak_bytes),
             "; ", probes, " probes in ", fixed_point(seconds, 2), " s",
             one_stage ? std::string()
                       : stage_budget > budget ? cat("; the ", stage, "s alone fit ", stage_budget, " tokens")
                                               : cat("; the ", stage, "s set the budget"));
}

BudgetBounds budget_bounds(const data::TokenDataset& dataset) {
  BudgetBounds bounds;
  const auto whole = static_cast<std::int64_t>(dataset.num_tokens());
  bounds.max_budget = std::max<std::int64_t>(
      1, std::min<std::int64_t>(std::numeric_limits<std::int32_t>::max(),
                                (whole + kBudgetGranule - 1) / kBudgetGranule * kBudgetGranule));
  for (std::uint64_t i = 0; i < dataset.num_samples(); ++i)
    if (const auto length = static_cast<std::int64_t>(dataset.sample_length(i))) ++bounds.samples_of_length[length];
  return bounds;
}

std::vector<std::int64_t> worst_fill(const BudgetBounds& bounds, std::int64_t budget,
                                     const std::function<double(std::int64_t length)>& score) {
  struct Kind {
    double score;
    std::int64_t length, count;
  };
  std::vector<Kind> kinds;  // lengths once cut at the budget
  for (const auto& [length, count] : bounds.samples_of_length) {
    const std::int64_t cut = std::min(length, budget);
    if (!kinds.empty() && kinds.back().length == cut) kinds.back().count += count;
    else kinds.push_back({score(cut), cut, count});
  }
  std::sort(kinds.begin(), kinds.end(), [](const Kind& a, const Kind& b) {
    return a.score != b.score ? a.score > b.score : a.length > b.length;
  });
  std::vector<std::int64_t> lengths;
  std::int64_t left = budget;
  for (const Kind& kind : kinds)
    for (std::int64_t i = 0; i < kind.count && left > 0; ++i) {
      lengths.push_back(std::min(kind.length, left));
      left -= lengths.back();
    }
  return lengths;
}

double longest_first(std::int64_t length) { return static_cast<double>(length); }

BudgetStage language_model_stage(model::CausalLMImpl& net) {
  BudgetStage stage;
  stage.name = "trainer";
  stage.vocab_size = net.config().vocab_size;
  stage.worst_first = {longest_first};  // attention's cost grows with a document's length
  stage.run = [&net](const PackedBatch& batch, std::mt19937_64&) {
    model::BackboneOutput out = net.forward_backbone(batch);
    model::LmLoss lm = model::lm_loss(net, out.hidden, batch);
    (lm.loss_sum + out.aux_loss * net.config().router_aux_loss_coef).backward();
  };
  stage.trained = net.parameters();
  return stage;
}

MeasuredBudget probe_token_budget(const BudgetStage& stage, const StepConfig& step, const BudgetBounds& bounds,
                                  const torch::Device& device, MPI_Comm stage_group, MPI_Comm job_group) {
  const auto started = std::chrono::steady_clock::now();
  // The ranks whose memory is this rank's: those on its GPU, or on CPU its node's.
  const comm::DeviceSharers sharers(job_group, device);
  MeasuredBudget measured;
  measured.stage = stage.name;
  measured.capacity_bytes = capacity_bytes(step, device, sharers.size());
  measured.planned_bytes = static_cast<std::int64_t>(step.memory_fraction * static_cast<double>(measured.capacity_bytes));
  // AdamW keeps exp_avg and exp_avg_sq like each parameter it trains.
  std::int64_t adamw_bytes = 0;
  for (const torch::Tensor& p : stage.trained) adamw_bytes += 2 * static_cast<std::int64_t>(p.nbytes());
  const auto later = [&](std::int64_t budget) {
    return adamw_bytes + static_cast<std::int64_t>(stage.later_bytes_per_token * static_cast<double>(budget));
  };

  const RestoresCpuGenerator restores_generator;
  std::mt19937_64 draws(step.seed);
  PeakMeter meter(device, outside_torch_share(device, sharers));
  meter.reset();
  measured.fixed_bytes = meter.now() + adamw_bytes;
  std::map<std::int64_t, std::int64_t> peaks;  // budget -> peak, of the fits
  // A CPU rank cannot survive a candidate that overruns the machine's RAM: one whose peak,
  // grown from the largest fit so far as attention's scores grow (the number of documents
  // times the square of their length, at the longest document of a worst case), would pass
  // the capacity is a miss without running.
  const std::int64_t longest = std::max<std::int64_t>(1, bounds.longest_sample());
  auto beyond_capacity = [&](std::int64_t budget) {
    if (device.is_cuda() || peaks.empty()) return false;
    const auto& [fit, peak] = *peaks.rbegin();
    const auto sequence = [&](std::int64_t b) {
      return static_cast<double>(std::max<std::int64_t>(1, std::min(b, longest)));
    };
    const double growth = static_cast<double>(budget) / static_cast<double>(fit) * sequence(budget) / sequence(fit);
    return static_cast<double>(measured.fixed_bytes) + static_cast<double>(peak - measured.fixed_bytes) * growth >
           static_cast<double>(measured.capacity_bytes);
  };
  auto peak_at = [&](std::int64_t budget) -> std::optional<std::int64_t> {
    const std::optional<std::int64_t> peak = measure(stage, bounds, budget, device, meter, draws);
    if (peak) return *peak + later(budget);
    return std::nullopt;
  };
  // A stop request ends the search: the candidates left count as misses without running (one
  // can take minutes on a CPU rank), and the ranks agree on the stop below.
  bool stopped = false;
  const auto search_mine = [&] {
    return search_token_budget(
        [&](std::int64_t budget) {
          stopped = stopped || stop_requested();
          if (stopped || beyond_capacity(budget)) return false;
          const auto tried = std::chrono::steady_clock::now();
          const std::optional<std::int64_t> peak = peak_at(budget);
          const bool fits = peak && *peak <= measured.planned_bytes;
          const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - tried).count();
          // A search can run for minutes: each candidate is news.
          log_info(cat("train.token_budget = \"auto\": ", budget, " tokens ", fits ? "fit" : "do not fit",
                       peak ? cat(" (peak ", format_bytes(*peak), " of ", format_bytes(measured.planned_bytes), " planned)")
                            : std::string(" (out of memory)"),
                       ", measured in ", fixed_point(seconds, 1), " s"));
          if (fits) peaks[budget] = *peak;
          return fits;
        },
        bounds.max_budget);
  };
  // Ranks on one GPU search in turn: a candidate that misses may take the whole GPU until
  // its out-of-memory error, which must not fail another rank's candidate.
  BudgetSearch search;
  if (!device.is_cuda()) search = search_mine();
  else
    for (int turn = 0; turn < sharers.size(); ++turn) {
      if (turn == sharers.rank()) search = search_mine();
      sharers.barrier();
    }
  measured.probes = search.probes;
  int any_stopped = stopped ? 1 : 0;
  comm::all_reduce_in_place(&any_stopped, 1, MPI_INT, MPI_MAX, job_group, "a stop during the token budget probe");
  if (any_stopped)
    throw JobExit(0, "stopped on request while train.token_budget = \"auto\" measured the budget, before the first "
                     "step: nothing was trained and no checkpoint written");

  // The stage's ranks: the smallest budget and plan, the largest fixed bytes (negated).
  std::int64_t agree[3] = {search.budget, measured.planned_bytes, -measured.fixed_bytes};
  comm::all_reduce_in_place(agree, 3, MPI_INT64_T, MPI_MIN, stage_group, "the automatic token budget");
  measured.stage_budget = agree[0];
  measured.planned_bytes = agree[1];
  measured.fixed_bytes = -agree[2];
  // Then the job's: a stage that fits nothing is the whole job's failure.
  std::int64_t agreed = agree[0];
  if (job_group != stage_group)
    comm::all_reduce_in_place(&agreed, 1, MPI_INT64_T, MPI_MIN, job_group, "the automatic token budget of the stream");
  if (agreed == 0)
    throw JobExit(2, cat("train.token_budget = \"auto\": not even a micro-batch of ",
                         std::min(kBudgetGranule, bounds.max_budget), " tokens fits train.memory_fraction = ",
                         step.memory_fraction, " of ", format_bytes(measured.capacity_bytes),
                         step.memory_limit > 0 ? " (train.memory_limit)" : "", " on one of the ranks",
                         measured.stage_budget == 0 ? cat(" (the fullest ", stage.name, " holds ",
                                                          format_bytes(measured.fixed_bytes), " before any micro-batch)")
                                                    : std::string(),
                         ": raise train.memory_limit or train.memory_fraction, or train a smaller model"));
  measured.budget = agreed;
  // A rank that fits more than the job agreed on measures the agreed budget once more. A peak
  // grows with the budget, so the peak of the smallest larger fit bounds that measure: on a CPU
  // rank the resident set can keep what a larger candidate freed, and the measure alone came out
  // above the plan that the larger fit had met.
  if (!peaks.count(agreed)) ++measured.probes;
  auto peak = peaks.count(agreed) ? std::optional<std::int64_t>(peaks[agreed]) : peak_at(agreed);
  if (const auto larger = peaks.lower_bound(agreed); larger != peaks.end())
    peak = peak ? std::min(*peak, larger->second) : larger->second;
  measured.peak_bytes = peak.value_or(measured.fixed_bytes);
  measured.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  int stage_rank = 0;
  MPI_Comm_rank(stage_group, &stage_rank);
  if (stage_rank == 0) log_info_here(measured.describe());
  return measured;
}

}  // namespace topotrain
