// Drafting's constructor: models, data, budget, the training session and the first link
// (drafting.h).
#include <algorithm>

#include "drafting.h"
#include "topotrain/core/log.h"
#include "topotrain/model/dflash_anchors.h"
#include "topotrain/train/dflash_pipeline.h"
#include "topotrain/train/held_out_eval.h"
#include "topotrain/train/out_of_memory.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/trained_models.h"
#include "topotrain/train/training_checkpoint.h"

namespace topotrain::drafting {

Drafting::Drafting(JobContext& context, model::CausalLM& target, const model::DFlashConfig& dflash,
                   const torch::Device& device)
    : context_(context),
      config_(context.config),
      topology_(context.run.topology),
      dflash_(dflash),
      device_(device),
      me_(context.runtime.rank()),
      drafter_(dflash),
      token_budget_(context.config.step.token_budget),
      target_(target) {
  Runtime& runtime = context.runtime;
  // The first drafter prints the drafters' news (progress, checkpoints): the run's log too.
  if (runtime.role_rank() == 0 && me_ != 0) log_run_to_file(config_.run_dir);
  drafter_->load_target_tensors(*target);
  // Fine-tuning: every drafter starts from the same weights (the session's broadcast would
  // make them so anyway); a resume then overwrites them with its checkpoint's.
  try {
    if (!config_.draft_weights.empty()) load_drafter_weights(config_.draft_weights, *drafter_);
  } catch (const ConfigError& e) {
    throw ConfigError(cat("model.draft_weights: ", e.what()));
  }
  drafter_->to(device_);
  drafter_->set_compute_dtype(compute_dtype(config_.dtype, device_));
  for (int t : topology_.targets_of(me_)) my_streams_.push_back(stream_of(topology_, t).index);

  // Drafters read no data but with held-out documents (the training split's length and
  // its end, the held-out set's size): else the dataset's header says how long the run is.
  // An automatic budget reads them too: the samples' lengths shape the probe's batches.
  held_out_ = config_.data.has_eval();
  std::int64_t train_tokens = 0;
  TrainingData data;  // held until the resumed state is checked against it
  if (held_out_ || config_.step.auto_budget) {
    data = load_training_data(config_);
    train_tokens = static_cast<std::int64_t>(data.train->num_tokens());
    train_samples_ = data.train->num_samples();
  } else {
    train_tokens = static_cast<std::int64_t>(data::TokenDataset::read_header(config_.data.path).num_tokens);
  }
  if (config_.step.auto_budget) {
    measured_ = probe_token_budget(budget_stage(), config_.step, budget_bounds(*data.train), device_,
                                   context.runtime.role_comm(), MPI_COMM_WORLD);
    token_budget_ = measured_->budget;
  }
  if (held_out_) {
    held_out_documents_ = data.held_out->num_samples();
    if (config_.cadences.eval_speculate > 0) {
      // Refused now rather than at the first evaluation, steps into the run.
      if (!data.held_out->has_loss_mask())
        throw ConfigError(cat("train.eval_speculate = ", config_.cadences.eval_speculate, ": the held-out documents (",
                              config_.data.eval_path.empty() ? "data.eval_fraction of " + config_.data.path
                                                             : config_.data.eval_path,
                              ") have no loss mask, so no assistant turn to cut a prompt before; hold out chat "
                              "data prepared from \"messages\" (topotrain-prepare), or set train.eval_speculate = 0"));
      held_out_set_ = data.held_out;
    }
    // The targets' check of the set, made here too, so that every rank refuses it before
    // one waits on another.
    pack_held_out(data.held_out, config_, token_budget_, 0, static_cast<int>(target_count(topology_)), false);
  }
  SessionSpec spec;
  spec.parameters = named_parameters_of(*drafter_);
  spec.model_name = kDFlashDrafterModel;
  spec.snapshot = [this](const NamedParameters& parameters, const AdamW& optimizer, const TrainingState& state) {
    return snapshot(context_.run, *drafter_, parameters, optimizer, state);
  };
  spec.length = training_length(config_.length, train_tokens);
  // The drafters' line, printed by the first of them; each step reports its FLOPs.
  spec.progress = progress_config_from(spec.length, runtime.role_size(), device_, 0);
  spec.initial = initial_state(config_.step.seed);
  spec.initial.streams.assign(target_count(topology_), spec.initial.data);
  session_ = std::make_unique<TrainingSession>(context, std::move(spec));
  // The training set, as moe_train checks it: a resume on another set is refused. Without the
  // dataset loaded the header's token count is what this rank knows of it.
  TrainingSetIdentity training_set;
  if (data.train) {
    training_set = training_set_identity(*data.train, config_.data.path);
  } else {
    training_set.tokens = train_tokens;
    training_set.path = config_.data.path;
    training_set.tokenizer_files = stored_tokenizer_files(config_.data.path);
  }
  adopt_training_set(session_->state(), training_set, config_);
  data = {};
  const std::size_t streams = session_->state().streams.size();
  if (streams != target_count(topology_))
    throw ConfigError(cat(session_->resumed_from(), " holds the data positions of ", streams, " target streams; ",
                          topology_.source, " has ", target_count(topology_),
                          " targets: resume with the number of targets the checkpoint was trained with"));
  if (measured_) session_->state().measured_budget = {measured_->budget, measured_->bytes_per_token()};
  send_stream_starts(topology_, me_, session_->state().streams, token_budget_);
  if (session_->lead())
    log_info_here(cat("drafter: ", model::count_drafter_parameters(dflash_), " trainable parameters, ",
                      dflash_.num_draft_layers, " layers, block ", dflash_.block_size, ", taps of target layers ",
                      model::taps_text(dflash_.resolved_taps()), ", loss ", model::to_string(dflash_.loss), ", ",
                      config_.step.grad_accum, " batch(es) per step taken ",
                      topology_.links.fan_in == FanIn::round_robin ? "round-robin" : "as they arrive", ", attention ",
                      model::to_string(drafter_->attention_options().backend), "; training ",
                      session_->length().describe(),
                      config_.draft_weights.empty() || !session_->resumed_from().empty()
                          ? std::string()
                          : cat("; starting from the drafter ", config_.draft_weights)));
  session_->start(pipeline_timing_config(config_, device_));
  if (session_->lead())
    log_start_block(session_->start_block(
        {{"target", model_text(config_.model)},
         {"drafter", cat(count_text(static_cast<double>(model::count_drafter_parameters(dflash_))), " parameters, ",
                         dflash_.num_draft_layers, " layer(s), block ", dflash_.block_size)},
         {"data", cat(config_.data.path, ": ", train_samples_ > 0 ? cat(train_samples_, " documents, ") : "",
                      train_tokens, " tokens", held_out_ ? cat("; ", held_out_documents_, " held-out documents") : "")},
         {"budget", cat(target_count(topology_), " target stream(s) of ", token_budget_, "-token batches -> ",
                        context.runtime.role_size(), " drafter(s) x ", config_.step.grad_accum, " batch(es) per step")},
         {"length", session_->length().describe()}}));
  open_link();
}

BudgetStage Drafting::budget_stage() {
  BudgetStage stage;
  stage.name = "drafter";
  stage.vocab_size = dflash_.target.vocab_size;
  // The longest contexts, and the most anchors per token (a document of L tokens has
  // min(train.anchors, L - 1) of them, each a block of block_size drafted tokens).
  const auto anchors = static_cast<double>(dflash_.max_anchors);
  stage.worst_first = {longest_first, [anchors](std::int64_t length) {
                         return std::min(anchors, static_cast<double>(length - 1)) / static_cast<double>(length);
                       }};
  stage.run = [this](const PackedBatch& batch, std::mt19937_64& draws) {
    // The hidden states' values do not matter: their memory does.
    const auto like = torch::TensorOptions().dtype(compute_dtype(config_.dtype, device_)).device(device_);
    const std::int64_t tokens = batch.num_tokens(), hidden = dflash_.target.hidden_size;
    model::DFlashBatch in;
    in.packed = batch;
    in.taps = torch::full({tokens, static_cast<std::int64_t>(dflash_.resolved_taps().size()) * hidden}, 0.5, like);
    if (dflash_.loss == model::DFlashLoss::kl) in.final_hidden = torch::full({tokens, hidden}, 0.5, like);
    auto generator = at::make_generator<at::CPUGeneratorImpl>(draws());
    const model::DFlashBlocks blocks =
        model::sample_anchors(batch.cu_seqlens, batch.loss_mask, dflash_.block_size, dflash_.max_anchors, generator);
    drafter_->forward(in, blocks).loss_sum.backward();
  };
  stage.trained = drafter_->parameters();
  // Beside the batch it trains on: the link's queue, the step's other batches, and during a
  // held-out pass the paused batches while the pass's own link fills its queue.
  const comm::LinkPayloads link = comm::link_payloads(link_config(topology_, context_.runtime.device()),
                                                      topology_.targets_of(me_).size(), device_.is_cuda());
  const double payloads = link.receiver * (held_out_ ? 2 : 1) + static_cast<double>(config_.step.grad_accum - 1);
  stage.later_bytes_per_token = payloads * payload_bytes_per_token(dflash_, config_, device_);
  return stage;
}

void Drafting::open_link() {
  // The targets take their old link down before they build the new one: so does this end.
  receiver_.reset();
  receiver_ = std::make_unique<comm::HiddenStateReceiver>(MPI_COMM_WORLD, comm::LinkEnds{me_, topology_.targets_of(me_)},
                                                          link_config(topology_, context_.runtime.device()));
  receiver_->set_wait_check(
      [this](double waited, const std::vector<int>& silent) { session_->watchdog().check_feed(waited, silent); });
}

}  // namespace topotrain::drafting
