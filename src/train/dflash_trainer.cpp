#include "topotrain/train/dflash_trainer.h"

#include <mpi.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <sstream>

#include "topotrain/comm/backend.h"
#include "topotrain/comm/grad_reducer.h"
#include "topotrain/comm/hidden_state_link.h"
#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/model/dflash_anchors.h"
#include "topotrain/model/dflash_drafter.h"
#include "topotrain/model/dflash_metrics.h"
#include "topotrain/model/hf_checkpoint.h"
#include "topotrain/model/qwen3.h"
#include "topotrain/train/adamw.h"
#include "topotrain/train/grad_clip.h"
#include "topotrain/train/lr_schedule.h"
#include "topotrain/train/progress.h"
#include "topotrain/train/run_setup.h"

namespace topotrain {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

model::DFlashConfig dflash_config_from(const Settings& settings) {
  model::DFlashConfig config;
  config.source = "settings";
  config.target = model_config_from(settings);
  config.num_draft_layers = settings.integer("model.draft_layers");
  config.block_size = settings.integer("model.block_size");
  if (settings.has("model.taps")) {
    std::stringstream list(settings.string("model.taps"));
    std::string item;
    while (std::getline(list, item, ',')) {
      try {
        config.taps.push_back(std::stoll(item));
      } catch (const std::exception&) {
        throw ConfigError(cat("model.taps = \"", settings.string("model.taps"),
                              "\": expected target layer numbers separated by commas, e.g. \"1,9,17\""));
      }
    }
  }
  const std::int64_t mask = settings.integer("model.mask_token_id");
  // The last id of the vocabulary is unused by the byte tokenizer and by Qwen's padding
  // rows, so it serves as the mask token unless one is named.
  config.mask_token_id = mask >= 0 ? mask : config.target.vocab_size - 1;
  config.gamma = settings.real("train.gamma");
  config.max_anchors = settings.integer("train.anchors");
  config.loss = model::parse_dflash_loss(settings.string("train.loss"), "train.loss");
  if (config.loss == model::DFlashLoss::kl)
    throw ConfigError("train.loss = \"kl\": the pipeline does not send the target's final hidden state yet; use ce");
  config.validate();
  return config;
}

comm::LinkConfig link_config(const Topology& topology, const Device& device) {
  comm::LinkConfig link;
  link.transport = topology.links.hidden_states;
  link.queue_depth = topology.links.queue_depth;
  link.device = device;
  return link;
}

// The batches target `rank` sends when its drafter trains `max_steps` steps: the steps
// dealt round-robin over the drafter's targets.
std::int64_t target_share(const Topology& topology, int rank, std::int64_t max_steps) {
  const std::vector<int> peers = topology.targets_of(topology.drafter_of(rank));
  const auto index = std::find(peers.begin(), peers.end(), rank) - peers.begin();
  const auto n = static_cast<std::int64_t>(peers.size());
  return max_steps / n + (index < max_steps % n ? 1 : 0);
}

void run_target(JobContext& context, model::Qwen3CausalLM& target, const std::vector<std::int64_t>& taps,
                const torch::Device& device) {
  Runtime& runtime = context.runtime;
  const Settings& settings = context.run.settings;
  const Topology& topology = context.run.topology;
  torch::NoGradGuard frozen;
  target->to(device);
  target->set_compute_dtype(compute_dtype_from(settings, device));

  auto dataset = load_dataset(settings);
  const TrainingLength length = training_length(settings, *dataset);
  const std::int64_t batches =
      length.max_steps > 0 ? target_share(topology, runtime.rank(), length.max_steps) : INT64_MAX;
  auto prefetcher = make_step_prefetcher(dataset, settings, settings.integer("train.token_budget"),
                                         runtime.role_rank(), runtime.role_size(), 1, initial_state(settings).data,
                                         device);
  const int drafter = topology.drafter_of(runtime.rank());
  comm::HiddenStateSender sender(MPI_COMM_WORLD, {drafter, topology.targets_of(drafter)},
                                 link_config(topology, runtime.device()));
  double forward_seconds = 0, send_seconds = 0;
  std::int64_t sent = 0, tokens = 0;
  while (sent < batches) {
    data::StepPlan plan = prefetcher->next();
    if (length.max_steps == 0 && static_cast<std::int64_t>(plan.position_before.epoch) >= length.epochs) break;
    const data::PackedBatch& batch = plan.micro_batches.front();
    auto started = Clock::now();
    model::BackboneOutput out = target->forward_backbone(to_model_batch(batch, device), taps);
    comm::PackedHiddenBatch packed;
    packed.cu_seqlens = batch.cu_seqlens;
    packed.token_ids = batch.tokens.to(torch::kInt32);
    packed.loss_mask = batch.loss_mask;
    packed.positions = batch.positions.to(torch::kInt32);
    packed.sample_ids = batch.sample_ids;
    packed.hidden = torch::cat(out.taps, -1).contiguous();
    forward_seconds += seconds_since(started);
    started = Clock::now();
    sender.send(packed);  // blocks while the drafter's queue is full
    send_seconds += seconds_since(started);
    ++sent;
    tokens += batch.num_tokens;
  }
  sender.close();
  const double total = forward_seconds + send_seconds;
  log_info(cat("target done: ", sent, " batches, ", tokens, " tokens; forward ",
               static_cast<int>(100 * forward_seconds / std::max(total, 1e-9)), "%, blocked on the queue ",
               static_cast<int>(100 * send_seconds / std::max(total, 1e-9)), "% (", tokens / std::max(total, 1e-9) / 1e3,
               " Ktok/s)"));
}

void run_drafter(JobContext& context, model::Qwen3CausalLM& target, const model::DFlashConfig& config,
                 const torch::Device& device) {
  Runtime& runtime = context.runtime;
  const Settings& settings = context.run.settings;
  const Topology& topology = context.run.topology;
  const std::int64_t seed = settings.integer("train.seed");

  model::DFlashDrafter drafter(config);
  drafter->load_target_tensors(*target);
  drafter->to(device);
  drafter->set_compute_dtype(compute_dtype_from(settings, device));
  const NamedParameters parameters = named_parameters_of(*drafter);
  auto backend = comm::make_backend(runtime.role_comm(), runtime.device());
  for (auto& [name, p] : parameters) backend->broadcast(p.data(), 0);
  comm::GradReducer reducer(parameters, *backend, grad_reducer_config_from(settings));
  reducer.zero_grad();
  AdamW optimizer(parameters, adamw_config_from(settings));
  const std::int64_t max_steps = settings.integer("train.max_steps");
  const std::int64_t planned_tokens =
      max_steps > 0 ? max_steps * settings.integer("train.token_budget") * runtime.role_size() : 0;
  LrSchedule schedule{settings.real("train.lr"), settings.real("train.min_lr_ratio"), settings.real("train.warmup"),
                      planned_tokens};
  if (runtime.role_rank() == 0)
    log_info_here(cat("drafter: ", model::count_drafter_parameters(config), " trainable parameters, ",
                 config.num_draft_layers, " layers, block ", config.block_size, ", taps of target layers ",
                 config.resolved_taps().size(), ", attention ", model::to_string(drafter->attention_options().backend)));

  const int me = runtime.rank();
  comm::HiddenStateReceiver receiver(MPI_COMM_WORLD, {me, topology.targets_of(me)},
                                     link_config(topology, runtime.device()));
  auto generator = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(seed + runtime.role_rank()));
  const std::int64_t log_every = std::max<std::int64_t>(1, settings.integer("log.every"));
  const std::size_t slots = static_cast<std::size_t>(config.block_size);
  std::vector<std::int64_t> correct(slots, 0), valid(slots, 0);
  double window_loss = 0, window_weight = 0, window_wait = 0, window_seconds = 0;
  std::int64_t step = 0, tokens = 0, window_tokens = 0;
  while (true) {
    auto started = Clock::now();
    std::optional<comm::PackedHiddenBatch> next = receiver.next();
    const double waited = seconds_since(started);
    // Drafters step together (their gradients are reduced): all stop once any stream ends.
    int have = next ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, runtime.role_comm());
    if (!have) break;

    const comm::PackedHiddenBatch& in = *next;
    model::DFlashBatch batch;
    batch.packed.tokens = in.token_ids.to(torch::kInt64).to(device);
    batch.packed.positions = in.positions.to(torch::kInt64).to(device);
    batch.packed.cu_seqlens = in.cu_seqlens.to(device);
    auto lengths = in.cu_seqlens.slice(0, 1) - in.cu_seqlens.slice(0, 0, -1);
    batch.packed.max_seqlen = lengths.max().item<std::int64_t>();
    batch.loss_mask = in.loss_mask.to(device);
    batch.taps = in.hidden;
    model::DFlashBlocks blocks =
        model::sample_anchors(in.cu_seqlens, in.loss_mask, config.block_size, config.max_anchors, generator);

    reducer.begin_micro_batch(true);
    model::DFlashStepOutput out = drafter->forward(batch, blocks);
    // Mean over the valid slots of every drafter's batch: the reduced gradient is then the
    // gradient of one drafter trained on the union of the streams.
    double weights[2] = {out.weight_sum, static_cast<double>(in.tokens())};
    MPI_Allreduce(MPI_IN_PLACE, weights, 2, MPI_DOUBLE, MPI_SUM, runtime.role_comm());
    (out.loss_sum / std::max(weights[0], 1e-12)).backward();
    reducer.finish();
    const double lr = schedule.at(tokens);
    clip_gradients(parameters, settings.real("train.clip"));
    optimizer.step(lr);
    reducer.zero_grad();
    ++step;
    tokens += static_cast<std::int64_t>(weights[1]);

    auto slot_correct = out.slot_correct.cpu();
    for (std::size_t k = 0; k < slots; ++k) {
      correct[k] += slot_correct[static_cast<std::int64_t>(k)].item<std::int64_t>();
      valid[k] += out.slot_valid[k];
    }
    window_loss += out.loss_sum.item<double>();
    window_weight += out.weight_sum;
    window_wait += waited;
    window_seconds += seconds_since(started);
    window_tokens += in.tokens();
    if (step % log_every == 0 && runtime.role_rank() == 0) {
      std::vector<double> accuracy = model::slot_accuracy(correct, valid);
      log_info_here(cat("step ", step, " | loss ", window_loss / std::max(window_weight, 1e-12), " | tau ",
                   model::acceptance_length(accuracy), " | acc@1 ", accuracy.size() > 1 ? accuracy[1] : 0.0,
                   " | lr ", lr, " | ", window_tokens / std::max(window_seconds, 1e-9) / 1e3,
                   " Ktok/s | starved ", static_cast<int>(100 * window_wait / std::max(window_seconds, 1e-9)),
                   "% | queue ", receiver.queue_size()));
      std::fill(correct.begin(), correct.end(), 0);
      std::fill(valid.begin(), valid.end(), 0);
      window_loss = window_weight = window_wait = window_seconds = 0;
      window_tokens = 0;
    }
  }
  if (runtime.role_rank() == 0) log_info_here(cat("drafter done: ", step, " steps, ", tokens, " tokens"));
}

}  // namespace

void train_dflash(JobContext& context) {
  Runtime& runtime = context.runtime;
  const Settings& settings = context.run.settings;
  const torch::Device device = torch_device(runtime.device());
  at::set_num_threads(1);
  const model::DFlashConfig config = dflash_config_from(settings);
  // Every rank builds the same target from the same seed (or loads the same weights):
  // targets run it, drafters keep its embedding, final norm and lm_head.
  torch::manual_seed(static_cast<std::uint64_t>(settings.integer("train.seed")));
  model::Qwen3CausalLM target(config.target);
  if (settings.has("model.weights")) model::load_hf_checkpoint(*target, settings.string("model.weights"));
  if (runtime.role() == "target") run_target(context, target, config.resolved_taps(), device);
  else run_drafter(context, target, config, device);
}

}  // namespace topotrain
