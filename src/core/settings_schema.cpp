// Every run setting topotrain knows, with its type, default and help. `moe_train
// --help-settings` prints this table; the README's settings reference follows it.
#include "topotrain/core/settings.h"

namespace topotrain {
namespace {

using T = SettingType;
constexpr std::monostate kUnset{};

}  // namespace

const std::vector<SettingSpec>& setting_specs() {
  static const std::vector<SettingSpec> specs = {
      // [model]
      {"model.preset", T::string, std::string("tiny-moe"),
       "model shape: moe-500m, qwen3-0.6b, qwen3-8b, tiny-moe, tiny-dense (dflash: the target's shape)"},
      {"model.config", T::string, kUnset, "HF config.json to take the model shape from instead of the preset"},
      {"model.weights", T::string, kUnset,
       "start from: HF safetensors, a topotrain checkpoint or run directory (dflash: the target's weights)"},
      {"model.dtype", T::string, std::string("auto"), "compute dtype: auto (bf16 on GPU, fp32 on CPU), bf16, fp32"},
      {"model.init_std", T::real, 0.02, "standard deviation of the random initialisation"},
      {"model.draft_layers", T::integer, std::int64_t{5}, "dflash: drafter decoder layers (and target taps)"},
      {"model.block_size", T::integer, std::int64_t{16}, "dflash: tokens per draft block (anchor + mask tokens)"},
      {"model.taps", T::string, kUnset,
       "dflash: target layers the drafter reads, e.g. \"1,9,17,25,33\" (unset: draft_layers spread over [1, L-3])"},
      {"model.mask_token_id", T::integer, std::int64_t{-1},
       "dflash: token whose embedding fills the block's slots 1..B-1 (-1: the vocabulary's last id)"},
      // [data]
      {"data.path", T::string, kUnset, "HDF5 token dataset (topotrain-prepare); unset: the built-in demo corpus"},
      {"data.long_samples", T::string, std::string("split"),
       "a sample longer than token_budget: split (positions continue) or truncate"},
      {"data.prefetch", T::integer, std::int64_t{4}, "micro-batches the prefetch thread keeps ready"},
      // [train]
      {"train.token_budget", T::integer, std::int64_t{2048}, "tokens per micro-batch per rank (packed, no padding)"},
      {"train.grad_accum", T::integer, std::int64_t{1}, "micro-batches per optimizer step; only the last all-reduces"},
      {"train.max_steps", T::integer, std::int64_t{0}, "stop after this many optimizer steps (0: no limit)"},
      {"train.max_tokens", T::integer, std::int64_t{0},
       "stop after this many tokens, also the LR schedule's length (0: one epoch)"},
      {"train.epochs", T::integer, std::int64_t{1}, "passes over the dataset when max_tokens is 0"},
      {"train.lr", T::real, 3e-4, "peak learning rate"},
      {"train.min_lr_ratio", T::real, 0.1, "cosine decay floor as a fraction of lr"},
      {"train.warmup", T::real, 0.04, "linear warmup, as a fraction of the schedule's tokens"},
      {"train.weight_decay", T::real, 0.1, "AdamW weight decay"},
      {"train.beta1", T::real, 0.9, "AdamW beta1"},
      {"train.beta2", T::real, 0.95, "AdamW beta2"},
      {"train.eps", T::real, 1e-8, "AdamW epsilon"},
      {"train.clip", T::real, 1.0, "clip the global gradient norm to this (0: off)"},
      {"train.seed", T::integer, std::int64_t{1234}, "seed of the data order and the initialisation"},
      {"train.bucket_mb", T::real, 25.0, "gradient all-reduce bucket size in MiB (the first bucket is 1 MiB)"},
      {"train.oom", T::string, std::string("fail"),
       "on CUDA out-of-memory: fail (print the resume command) or shrink (halve token_budget and go on)"},
      {"train.anchors", T::integer, std::int64_t{512}, "dflash: anchors sampled per sequence"},
      {"train.loss", T::string, std::string("ce"), "dflash: ce, or kl against the target's logits at the anchors"},
      {"train.gamma", T::real, 7.0, "dflash: slot k's loss weight is exp(-(k-1)/gamma)"},
      // [checkpoint]
      {"checkpoint.dir", T::string, std::string("checkpoints"), "root of run directories"},
      {"checkpoint.run", T::string, kUnset, "run directory name (unset: the topology's name)"},
      {"checkpoint.every_steps", T::integer, std::int64_t{100}, "checkpoint every N optimizer steps (0: only at the end; -1: never, for benchmarks)"},
      {"checkpoint.keep", T::integer, std::int64_t{3}, "complete checkpoints kept"},
      // [log]
      {"log.every", T::integer, std::int64_t{10}, "print a progress line every N steps"},
      {"log.level", T::string, std::string("info"), "debug, info, warn or error"},
      {"log.all_ranks", T::boolean, false, "every rank logs, not only rank 0"},
      {"log.samples", T::boolean, false,
       "every rank lists the sample pieces it trains in <run>/samples-rank-N.txt (resume audits)"},
      {"log.timings_every", T::integer, std::int64_t{20}, "ship step timings to rank 0 every N steps"},
      {"log.profile_step", T::integer, std::int64_t{0},
       "profile step N on every rank (0: off): <run>/profile-stepN-rankR.txt and a Chrome trace"},
  };
  return specs;
}

}  // namespace topotrain
