// TrainingSession on its own, on 1 or 2 trainer ranks (tests/train/CMakeLists.txt runs it
// with train.clip = 0, train.skip_nonfinite = true, train.oom = "shrink", and train.eps = 0.5,
// so that AdamW's update depends on the gradient's scale, the divisor included), with a model
// of one [2, 3] weight whose gradient each micro-batch sets to a known value:
//   step 1  accumulation: two micro-batches per rank, a gradient divisor per rank. The weight
//           after optimizer_step equals torch::optim::AdamW's after the gradient summed over
//           every rank and micro-batch and divided by the summed divisors; the agreed sums are
//           the ranks' sums.
//   step 2  the last rank's sums are not finite: every rank skips the step (skipped(), the
//           weight unchanged, the job goes on).
//   step 3  the last rank runs out of memory (TOPOTRAIN_FAULT_OOM): every rank's agreement
//           names it, no rank applies the step, and after_out_of_memory halves the budget.
//   step 3 again  applies, as step 1 did.
//   step 4  no divisor (a mean loss, as moe_train's): the summed gradient is applied as it is.
// On one rank optimizer_step enqueues the update before its read ("the update before the
// read"); on two it enqueues it after the agreement: both paths are checked. Prints PASS on
// every rank; a failed check throws, and the job runner ends every rank with its message.
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/train/job.h"
#include "topotrain/train/moe_trainer.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/training_checkpoint.h"
#include "topotrain/train/training_session.h"

namespace topotrain {
namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("training_session_probe: " + what);
}

// The gradient rank `rank`'s micro-batch `m` contributes: distinct per rank and micro-batch.
torch::Tensor micro_gradient(int rank, int m, std::int64_t step) {
  return torch::arange(6, torch::kFloat32).reshape({2, 3}) * (rank + 1) - static_cast<double>(m) * 0.5 +
         static_cast<double>(step);
}

double divisor_of(int rank) { return 2.0 + rank; }

void probe(JobContext& context) {
  const RunConfig& config = context.config;
  const int ranks = context.runtime.role_size(), me = context.runtime.role_rank();
  const int last = ranks - 1;
  const torch::Device cpu(torch::kCPU);
  torch::Tensor weight = torch::linspace(-1, 1, 6, torch::kFloat32).reshape({2, 3}).set_requires_grad(true);

  SessionSpec spec;
  spec.parameters = {{"weight", weight}};
  spec.model_name = "training-session-probe";
  spec.snapshot = [&](const NamedParameters& parameters, const AdamW& optimizer, const TrainingState& state) {
    return snapshot(context.run, spec.model_name, parameters, optimizer, state);
  };
  spec.length = training_length(config.length, 1 << 20);
  spec.progress = progress_config_from(spec.length, ranks, cpu, 0);
  spec.initial = initial_state(config.step.seed);
  TrainingSession session(context, spec);
  session.start(timing_log_config(config.cadences, cpu));

  // An independent reference: torch's AdamW on a copy, fed the expected reduced gradient.
  torch::Tensor reference = weight.detach().clone().set_requires_grad(true);
  torch::optim::AdamW torch_adamw(
      {reference}, torch::optim::AdamWOptions(config.lr.peak)
                       .betas({config.adamw.beta1, config.adamw.beta2})
                       .eps(config.adamw.eps)
                       .weight_decay(config.adamw.weight_decay));

  // One step of the session: each rank's two micro-batches, then optimizer_step with `loss`
  // as its one sum and this rank's divisor, or none (`divided` false: a mean loss, as
  // moe_train's).
  auto step = [&](double loss, bool divided = true) {
    session.begin_step();
    for (int m = 0; m < 2; ++m)
      session.accumulate(m, 2, true, [&] { (weight * micro_gradient(me, m, session.step())).sum().backward(); });
    return session.optimizer_step({divided ? std::optional<double>(divisor_of(me)) : std::nullopt,
                                   {torch::tensor(loss, torch::kFloat64)}});
  };
  auto end_step = [&] {
    session.state().step += 1;
    session.end_step(StepReport{}, StepMetrics{});
  };
  auto expect_applied = [&](const comm::StepAgreement& all, std::int64_t step_number, bool divided = true) {
    check(!all.out_of_memory() && !session.failed() && !session.skipped(), "the step was not applied");
    torch::Tensor gradient = torch::zeros({2, 3});
    double divisor = divided ? 0 : 1;
    for (int r = 0; r < ranks; ++r) {
      if (divided) divisor += divisor_of(r);
      for (int m = 0; m < 2; ++m) gradient += micro_gradient(r, m, step_number);
    }
    reference.mutable_grad() = gradient / divisor;
    for (auto& group : torch_adamw.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(session.lr());
    torch_adamw.step();
    const double error = (weight.detach() - reference.detach()).abs().max().item<double>();
    check(error <= 1e-6, cat("step ", step_number, ": the weight is ", error, " from torch's AdamW"));
    check(all.sums.size() == 1, cat("the agreement holds ", all.sums.size(), " sums, expected 1"));
  };

  // Step 1: accumulation over micro-batches and ranks.
  {
    const comm::StepAgreement all = step(1.0 + me);
    expect_applied(all, 1);
    check(all.sums[0] == ranks * (ranks + 1) / 2.0, cat("the agreed sum is ", all.sums[0]));
    end_step();
  }
  // Step 2: the last rank's sums are not finite; every rank skips.
  {
    const torch::Tensor before = weight.detach().clone();
    const comm::StepAgreement all = step(me == last ? std::numeric_limits<double>::quiet_NaN() : 1.0);
    check(!session.failed() && session.skipped(), "a step with a non-finite sum was not skipped");
    check(all.nonfinite_rank == last, cat("the agreement's non-finite rank is ", all.nonfinite_rank));
    check(torch::equal(weight.detach(), before), "a skipped step changed the weight");
    end_step();
  }
  // Step 3: the last rank runs out of memory; no rank applies the step.
  {
    const torch::Tensor before = weight.detach().clone();
    const comm::StepAgreement all = step(1.0);
    check(all.out_of_memory() && all.oom_rank == last, cat("the agreement's out-of-memory rank is ", all.oom_rank));
    check(torch::equal(weight.detach(), before), "a step with an out-of-memory rank changed the weight");
    const std::optional<std::int64_t> halved = session.after_out_of_memory(all, 256);
    check(halved == 128, "after_out_of_memory did not halve the budget");
  }
  // Step 3 again: applied.
  expect_applied(step(1.0), 3);
  end_step();
  // Step 4: no divisor; the summed gradient is applied as it is.
  expect_applied(step(1.0, /*divided=*/false), 4, /*divided=*/false);
  end_step();
  session.finish();
  log_info_here("PASS");
}

}  // namespace
}  // namespace topotrain

int main(int argc, char** argv) {
  using namespace topotrain;
  // The last trainer's step 3 runs out of memory (core/fault_injection.h), before the job
  // reads its settings: the world size is mpirun's.
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const std::string last = std::to_string((size ? std::atoi(size) : 1) - 1);
  setenv("TOPOTRAIN_FAULT_OOM", (last + ":3").c_str(), 1);
  JobOptions options = parse_job_options(argc, argv, moe_job());
  return run_job(argc, argv, moe_job(), options, [](const RunFile&, const RunConfig&) {}, probe);
}
