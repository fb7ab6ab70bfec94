// Every run setting topotrain knows, with its type, default, accepted values, help and,
// for a key only one job reads, that job. `moe_train --help-settings` prints the keys
// moe_train reads; the README's settings reference is the whole table
// (tests/core/settings_reference_test.cpp keeps them equal).
#include "topotrain/core/settings.h"

namespace topotrain {
namespace {

using T = SettingType;
constexpr std::monostate kUnset{};
// Integers that components hold as `int` (token counts per micro-batch, step counts).
constexpr double kIntMax = 2147483647.0;
// A bucket of 1 TiB already holds any model's gradients; the bound keeps the byte count the
// reducer computes from it an exact int64.
constexpr double kMaxBucketMiB = 1048576.0;

SettingRange any() { return {}; }
SettingRange at_least(double min) { return {min, false, HUGE_VAL, false, {}}; }
SettingRange above(double min) { return {min, true, HUGE_VAL, false, {}}; }
SettingRange above_up_to(double min, double max) { return {min, true, max, false, {}}; }
SettingRange between(double min, double max) { return {min, false, max, false, {}}; }
SettingRange from_up_to_below(double min, double max) { return {min, false, max, true, {}}; }
// An integer key that also takes `words` in place of a number.
SettingRange between_or(double min, double max, std::vector<std::string> words) {
  return {min, false, max, false, std::move(words)};
}
SettingRange one_of(std::vector<std::string> choices) { return {-HUGE_VAL, false, HUGE_VAL, false, std::move(choices)}; }

}  // namespace

const std::vector<SettingSpec>& setting_specs() {
  static const std::vector<SettingSpec> specs = {
      // [model]
      {"model.preset", T::string, std::string("tiny-moe"), any(),
       "model shape: moe-500m, qwen3-0.6b, qwen3-8b, tiny-moe, tiny-dense (dflash: the target's shape)"},
      {"model.config", T::string, kUnset, any(), "HF config.json to take the model shape from instead of the preset"},
      {"model.weights", T::string, kUnset, any(),
       "start from: an HF model folder (or its safetensors), a topotrain checkpoint or run directory, whose "
       "config.json or stored config gives the shape unless model.config is set; a model.preset set anywhere must "
       "name the same model (dflash: the target's weights)"},
      {"model.dtype", T::string, std::string("auto"), one_of({"auto", "bf16", "fp32"}),
       "compute dtype; auto: bf16 on GPU, fp32 on CPU"},
      {"model.expert_layout", T::string, std::string("busiest_first"), one_of({"busiest_first", "expert_order"}),
       "the MoE experts' group order in the grouped GEMMs, a speed choice: both train the same weights bit for "
       "bit; fp32 compute runs in expert order",
       "moe_train"},
      {"model.init_std", T::real, 0.02, above(0),
       "standard deviation of the random initialisation (HF initializer_range; model.config's value wins unless "
       "this is set)"},
      {"model.draft_layers", T::integer, std::int64_t{5}, between(1, kIntMax),
       "dflash: drafter decoder layers (and target taps)", "dflash_train"},
      {"model.block_size", T::integer, std::int64_t{16}, between(2, kIntMax),
       "dflash: tokens per draft block (anchor + mask tokens)", "dflash_train"},
      {"model.taps", T::string, kUnset, any(),
       "dflash: target layers the drafter reads, e.g. \"1,9,17,25,33\" (unset: draft_layers spread over [1, L-3])",
       "dflash_train"},
      {"model.mask_token_id", T::integer, std::int64_t{-1}, between(-1, kIntMax),
       "dflash: token whose embedding fills the block's slots 1..B-1 (-1: the vocabulary's last id)", "dflash_train"},
      {"model.draft_weights", T::string, kUnset, any(),
       "dflash: start the drafter from a drafter folder (topotrain-export), checkpoint or run directory; its "
       "draft_layers, block_size, taps and mask_token_id apply (a setting that differs is refused)",
       "dflash_train"},
      // [data]
      {"data.path", T::string, kUnset, any(),
       "HDF5 token dataset (topotrain-prepare); unset: the built-in demo corpus"},
      {"data.long_samples", T::string, std::string("split"), one_of({"split", "truncate"}),
       "a sample longer than token_budget: split (positions continue) or truncate"},
      {"data.prefetch", T::integer, std::int64_t{4}, at_least(1), "micro-batches the prefetch thread keeps ready"},
      {"data.eval_path", T::string, kUnset, any(),
       "HDF5 token dataset of held-out documents (same vocabulary as data.path) whose mean loss (dflash_train: the "
       "drafter's tau and per-slot acceptance) train.eval_every reports"},
      {"data.eval_fraction", T::real, 0.0, from_up_to_below(0, 1),
       "hold out this fraction of data.path's documents for evaluation instead (a draw seeded by train.seed, the "
       "same on every launch; 0: none)"},
      // [train]
      // The floor is train/run_config.h's kMinTokenBudget (core cannot include train).
      {"train.token_budget", T::integer, std::int64_t{2048}, between_or(2, kIntMax, {"auto"}),
       "tokens per micro-batch per rank (packed, no padding, never across an epoch boundary; at least 2, a token and "
       "its next-token target); refused at start when "
       "one micro-batch cannot fit a rank's memory; auto: every launch measures the largest that fits "
       "train.memory_fraction of train.memory_limit (dflash_train: the smallest of the targets' and drafters')"},
      {"train.memory_fraction", T::real, 0.9, between(0.01, 1),
       "token_budget = \"auto\": the share of train.memory_limit one rank's measured peak may reach"},
      {"train.memory_limit", T::integer, std::int64_t{0}, at_least(0),
       "token_budget = \"auto\": bytes of memory one rank may use (0: its share of its GPU's capacity, or on CPU of "
       "the machine's RAM, among the ranks on it)"},
      {"train.grad_accum", T::integer, std::int64_t{1}, between(1, kIntMax),
       "micro-batches per optimizer step; only the last all-reduces"},
      {"train.max_steps", T::integer, std::int64_t{0}, at_least(0),
       "stop after this many optimizer steps (0: no limit); where the LR schedule ends if it ends the run first "
       "(train.schedule)"},
      {"train.max_tokens", T::integer, std::int64_t{0}, at_least(0),
       "stop after this many tokens (0: epochs decide); where the LR schedule ends if it ends the run first "
       "(train.schedule)"},
      {"train.epochs", T::integer, std::int64_t{1}, at_least(1), "passes over the dataset when max_tokens is 0"},
      {"train.schedule", T::string, std::string("run"), one_of({"run", "tokens", "steps"}),
       "the LR schedule's length: run (it ends where the run ends: max_steps, max_tokens or the epochs, whichever "
       "comes first, each on its own clock), tokens (max_tokens, else epochs x the dataset's tokens; max_steps only "
       "stops early, to resume on the same schedule) or steps (max_steps, which must be > 0)"},
      {"train.lr", T::real, 3e-4, at_least(0), "peak learning rate"},
      {"train.min_lr_ratio", T::real, 0.1, between(0, 1), "cosine decay floor as a fraction of lr"},
      {"train.warmup", T::real, 0.04, between(0, 1), "linear warmup, as a fraction of the LR schedule's length"},
      {"train.weight_decay", T::real, 0.1, at_least(0), "AdamW weight decay"},
      {"train.beta1", T::real, 0.9, from_up_to_below(0, 1), "AdamW beta1"},
      {"train.beta2", T::real, 0.95, from_up_to_below(0, 1), "AdamW beta2"},
      {"train.eps", T::real, 1e-8, above(0), "AdamW epsilon"},
      {"train.clip", T::real, 1.0, at_least(0), "clip the global gradient norm to this (0: off)"},
      {"train.seed", T::integer, std::int64_t{1234}, at_least(0), "seed of the data order and the initialisation"},
      {"train.bucket_mb", T::real, 25.0, above_up_to(0, kMaxBucketMiB),
       "gradient all-reduce bucket size in MiB (the first bucket is 1 MiB)"},
      {"train.oom", T::string, std::string("fail"), one_of({"fail", "shrink"}),
       "on CUDA out-of-memory, fail (print the resume command) or shrink (halve token_budget and go on; "
       "dflash_train: every stream restarts where its last trained batch ended); with token_budget = \"auto\" "
       "and train.oom unset: shrink, by the probe's measure"},
      {"train.skip_nonfinite", T::boolean, false, any(),
       "a step whose loss or gradient norm (dflash_train: the drafters') is not finite is skipped and counted "
       "(false: the job stops, exit 4)"},
      {"train.eval_every", T::integer, std::int64_t{0}, between(0, kIntMax),
       "evaluate the held-out documents every N steps and after the last (0: after the last only); needs "
       "data.eval_path or data.eval_fraction"},
      {"train.eval_speculate", T::integer, std::int64_t{0}, between(0, kIntMax),
       "dflash: each held-out evaluation also decodes the first N held-out prompts (before each assistant turn) by "
       "greedy DFlash speculative decoding on the first drafter, as topotrain-speculate does (real tau, a trivial "
       "drafter's, target forwards per token, lossless), with the target's weights on that drafter's device; 0: off",
       "dflash_train"},
      {"train.hang_timeout_s", T::real, 600.0, at_least(0),
       "seconds a rank may wait for the others in a step's collectives before every rank stops with a message "
       "naming the ranks that did not arrive (exit 5); twice that, and at least 60 s more, for a process's first step "
       "and around checkpoints, and for a dflash target waiting on its drafter; 0: off. 600 is torch's NCCL watchdog default (every collective, its first included)"},
      {"train.anchors", T::integer, std::int64_t{512}, between(1, kIntMax), "dflash: anchors sampled per sequence",
       "dflash_train"},
      {"train.loss", T::string, std::string("ce"), one_of({"ce", "kl"}),
       "dflash: ce, or kl against the target's logits at the anchors", "dflash_train"},
      {"train.gamma", T::real, 7.0, above(0), "dflash: slot k's loss weight is exp(-(k-1)/gamma)", "dflash_train"},
      // [checkpoint]
      {"checkpoint.dir", T::string, std::string("checkpoints"), any(), "root of run directories"},
      {"checkpoint.run", T::string, kUnset, any(),
       "run directory: one folder under checkpoint.dir (unset: the topology's name)"},
      {"checkpoint.every_steps", T::integer, std::int64_t{100}, at_least(-1),
       "checkpoint every N optimizer steps (0: only at the end; -1: never, for benchmarks)"},
      {"checkpoint.keep", T::integer, std::int64_t{3}, between(1, kIntMax), "complete checkpoints kept"},
      {"checkpoint.pinned", T::boolean, true, any(),
       "snapshot GPU state into pinned host memory, copied under the next step (false: pageable memory; the copy "
       "stalls training)"},
      // [log]
      {"log.every", T::integer, std::int64_t{10}, at_least(1), "print a progress line every N steps"},
      {"log.level", T::string, std::string("info"), one_of({"debug", "info", "warn", "error"}),
       "the least severe messages printed; progress lines print at warn too"},
      {"log.all_ranks", T::boolean, false, any(), "every rank logs, not only rank 0"},
      {"log.samples", T::boolean, false, any(),
       "every rank lists the sample pieces it trains in the run directory's samples-rank-N.txt (resume audits)"},
      {"log.tensorboard", T::boolean, false, any(),
       "TensorBoard event files of the run's curves in the run directory's tensorboard/ (one per launch)"},
      {"log.timings_every", T::integer, std::int64_t{20}, between(1, kIntMax),
       "ship step timings to rank 0 every N steps"},
      {"log.profile_step", T::integer, std::int64_t{0}, at_least(0),
       "profile step N on every rank (0: off): profile-stepN-rankR.txt (and a Chrome trace) in the run directory"},
      {"log.profile_steps", T::integer, std::int64_t{1}, between(1, 1000),
       "consecutive steps in that profile, from log.profile_step on"},
      {"log.profile_host", T::boolean, true, any(),
       "false: record the GPU only, without the host-side cost per operation that makes a step look idle (GPU "
       "ranks)"},
  };
  return specs;
}

}  // namespace topotrain
