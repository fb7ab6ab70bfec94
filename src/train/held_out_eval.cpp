#include "topotrain/train/held_out_eval.h"

#include "topotrain/comm/watchdog.h"
#include "topotrain/core/error.h"
#include "topotrain/data/step_planner.h"
#include "topotrain/model/lm_loss.h"

namespace topotrain {

HeldOutShare pack_held_out(std::shared_ptr<const data::TokenDataset> documents, const RunConfig& config,
                           std::int64_t token_budget, int rank, int world, bool pin_memory) {
  HeldOutShare share;
  share.totals.documents = documents->num_samples();
  data::PackerConfig packing;
  packing.token_budget = static_cast<std::uint64_t>(token_budget);
  packing.long_samples = config.data.long_samples;
  packing.shuffle = false;
  packing.pin_memory = pin_memory;
  packing.end_epoch = 1;  // one pass
  data::StepPlanner planner(std::move(documents), packing, data::DataParallelConfig{world, rank, 1}, {});
  for (data::StepPlan plan = planner.next_step(); plan.global_tokens > 0; plan = planner.next_step()) {
    share.totals.targets += plan.global_loss_targets;
    share.totals.tokens += plan.global_tokens;
    if (plan.micro_batches.front().num_tokens() > 0) share.batches.push_back(std::move(plan.micro_batches.front()));
  }
  if (share.totals.targets == 0)
    throw ConfigError(cat("the held-out documents (", config.data.eval_path.empty() ? "data.eval_fraction" :
                          config.data.eval_path, ") have no next-token target to evaluate: every document is one "
                          "token long or masked out (loss_mask 0)"));
  return share;
}

HeldOutEval::HeldOutEval(std::shared_ptr<const data::TokenDataset> documents, const RunConfig& config,
                         std::int64_t token_budget, int rank, int world, const torch::Device& device)
    : every_(config.cadences.eval_every), device_(device) {
  HeldOutShare share = pack_held_out(std::move(documents), config, token_budget, rank, world, device.is_cuda());
  mine_ = std::move(share.batches);
  totals_ = share.totals;
}

bool held_out_due(std::int64_t eval_every, std::int64_t step, bool last) {
  return last || (eval_every > 0 && step % eval_every == 0);
}

bool HeldOutEval::due(std::int64_t step, bool last) const { return held_out_due(every_, step, last); }

HeldOutLoss HeldOutEval::evaluate(model::CausalLMImpl& net, MPI_Comm group) const {
  torch::NoGradGuard no_grad;
  auto sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  for (const PackedBatch& host : mine_) {
    const PackedBatch batch = host.to(device_, /*non_blocking=*/true);
    sum += model::lm_loss(net, net.forward_backbone(batch).hidden, batch).loss_sum;
  }
  double total = sum.item<double>();
  comm::all_reduce_in_place(&total, 1, MPI_DOUBLE, MPI_SUM, group, "MPI_Iallreduce (held-out loss)");
  HeldOutLoss out = totals_;
  out.loss = total / static_cast<double>(totals_.targets);  // never 0: the constructor refuses such a set
  return out;
}

}  // namespace topotrain
