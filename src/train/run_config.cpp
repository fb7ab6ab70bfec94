#include "topotrain/train/run_config.h"

#include <charconv>

#include "topotrain/core/error.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/train/trained_models.h"
#include "topotrain/train/training_checkpoint.h"

#ifndef TOPOTRAIN_DEMO_DATASET
#error "CMake defines TOPOTRAIN_DEMO_DATASET: the demo corpus built with topotrain"
#endif

namespace topotrain {
namespace {

// model.weights gives the shape when model.config is unset: a topotrain checkpoint's stored
// config or a Hugging Face folder's config.json. A model.preset that anything set (the
// topology, a --config file, --set) must name that same model: a preset the user never
// chose for these weights is refused naming both, not built and then failing tensor by
// tensor. A path that cannot be read gives nothing here: load_model_weights reads it again
// and reports that on every rank at once, which an exception here could not.
std::optional<model::ModelConfig> config_of_weights(const Settings& settings) {
  if (!settings.has("model.weights")) return std::nullopt;
  const std::string& weights = settings.string("model.weights");
  std::optional<model::ModelConfig> held;
  try {
    const auto checkpoint = CheckpointReader::checkpoint_at(weights);
    if (checkpoint && !stored_model_config(*checkpoint, CheckpointReader::load_header(*checkpoint))) {
      log_info(cat("model.weights = \"", weights, "\": ", *checkpoint, " stores no model config (written by an "
                   "older topotrain); building model.preset '", settings.string("model.preset"),
                   "' (set model.preset or model.config to the model it holds)"));
      return std::nullopt;
    }
    held = target_config_at(weights);
  } catch (const ConfigError&) {
    return std::nullopt;  // reported by load_model_weights, collectively (see above)
  }
  const std::string& origin = settings.origin("model.preset");
  if (origin == "default") return held;
  const std::string& name = settings.string("model.preset");
  const model::ModelConfig preset = model::ModelConfig::preset(name);
  if (preset.same_model(*held)) return held;
  throw ConfigError(cat("model.preset = \"", name, "\" (", origin, ") is not the model model.weights = \"", weights,
                        "\" (", settings.origin("model.weights"), ") holds, ", held->source, ": ",
                        preset.differences(*held), " (preset vs weights). Leave model.preset unset to build the "
                        "weights' model (`--set model.preset=` takes back a value the topology sets), or name "
                        "weights of the preset's shape"));
}

// model.draft_weights: the drafter's layers, block size, taps and mask token are those of the
// drafter it names, which a setting may repeat but not contradict, and that drafter's target
// must have the shape of this run's.
void adopt_draft_weights(const Settings& settings, model::DFlashConfig& config) {
  const std::string& path = settings.string("model.draft_weights");
  const std::string named = cat("model.draft_weights = \"", path, "\" (", settings.origin("model.draft_weights"), ")");
  model::DFlashConfig trained;
  std::vector<std::int64_t> trained_taps;
  try {
    trained = drafter_config_at(path);
    trained.check_target(config.target);
    trained_taps = trained.resolved_taps();
  } catch (const ConfigError& e) {
    throw ConfigError(cat(named, ": ", e.what()));
  }
  // A key set to a value (even its default) must agree; one left at its default takes the drafter's.
  auto adopt = [&](const char* key, auto& mine, const auto& theirs, const std::string& mine_text,
                   const std::string& theirs_text) {
    if (settings.origin(key) != "default" && mine != theirs)
      throw ConfigError(cat(key, " = ", mine_text, " (", settings.origin(key), ") but ", named, " holds a drafter of ",
                            key, " ", theirs_text, ": leave ", key, " unset to take the drafter's, or leave "
                            "model.draft_weights unset to start a drafter afresh"));
    mine = theirs;
  };
  auto number = [](std::int64_t n) { return std::to_string(n); };
  adopt("model.draft_layers", config.num_draft_layers, trained.num_draft_layers, number(config.num_draft_layers),
        number(trained.num_draft_layers));
  adopt("model.block_size", config.block_size, trained.block_size, number(config.block_size),
        number(trained.block_size));
  adopt("model.taps", config.taps, trained_taps, cat('"', model::taps_text(config.taps), '"'),
        cat('"', model::taps_text(trained_taps), '"'));
  adopt("model.mask_token_id", config.mask_token_id, trained.mask_token_id, number(config.mask_token_id),
        number(trained.mask_token_id));
}

model::DFlashConfig dflash_config_from(const Settings& settings, const model::ModelConfig& target) {
  model::DFlashConfig config;
  config.source = "settings";
  config.target = target;
  config.num_draft_layers = settings.integer("model.draft_layers");
  config.block_size = settings.integer("model.block_size");
  if (settings.has("model.taps")) {
    const std::string& text = settings.string("model.taps");
    for (std::size_t begin = 0, end = 0; end != std::string::npos; begin = end + 1) {
      end = text.find(',', begin);
      const std::string item = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
      // The whole item is the number: "1abc" and "1.9" are not layer 1, "" (as in "1,,2") no layer.
      const auto first = item.find_first_not_of(' ');
      const auto last = item.find_last_not_of(' ');
      std::int64_t layer = -1;
      const char* from = item.data() + (first == std::string::npos ? item.size() : first);
      const char* to = first == std::string::npos ? from : item.data() + last + 1;
      const auto parsed = std::from_chars(from, to, layer);
      if (from == to || parsed.ec != std::errc() || parsed.ptr != to)
        throw ConfigError(cat("model.taps = \"", text, "\" (", settings.origin("model.taps"), "): '", item,
                              "' is not a layer number; expected target layer numbers separated by commas, e.g. "
                              "\"1,9,17\""));
      config.taps.push_back(layer);
    }
  }
  const std::int64_t mask = settings.integer("model.mask_token_id");
  // The last id of the vocabulary is unused by the byte tokenizer and by Qwen's padding
  // rows, so it serves as the mask token unless one is named.
  config.mask_token_id = mask >= 0 ? mask : config.target.vocab_size - 1;
  config.gamma = settings.real("train.gamma");
  config.max_anchors = settings.integer("train.anchors");
  config.loss = model::parse_dflash_loss(settings.string("train.loss"), "train.loss");
  if (settings.has("model.draft_weights")) adopt_draft_weights(settings, config);
  config.validate();
  return config;
}

// The schema admits only auto, bf16 and fp32.
DtypeChoice dtype_from(const Settings& settings) {
  const std::string& dtype = settings.string("model.dtype");
  return dtype == "bf16" ? DtypeChoice::bf16 : dtype == "fp32" ? DtypeChoice::fp32 : DtypeChoice::auto_;
}

// checkpoint.dir/<checkpoint.run, else the topology's name>: one folder of its own, so that
// runs never share (or escape) checkpoint.dir's files.
std::string run_directory(const RunFile& run) {
  const Settings& s = run.settings;
  const bool named = s.has("checkpoint.run");
  const std::string name = named ? s.string("checkpoint.run") : run.topology.name;
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw ConfigError(cat(named ? cat("checkpoint.run = \"", name, "\" (", s.origin("checkpoint.run"), ")")
                                : cat("the topology's name \"", name, "\" (", run.topology.source,
                                      "; the run directory's name while checkpoint.run is unset)"),
                          " does not name one folder under checkpoint.dir (", s.string("checkpoint.dir"),
                          "): use a name without '/', other than '.' and '..', e.g. checkpoint.run = \"run1\""));
  return s.string("checkpoint.dir") + "/" + name;
}

// data.eval_path or data.eval_fraction, never both; train.eval_every (and dflash_train's
// train.eval_speculate) only with one of them.
DataConfig held_out_config_from(const Settings& settings, DataConfig data, const std::string& job) {
  if (settings.has("data.eval_path")) data.eval_path = settings.string("data.eval_path");
  data.eval_fraction = settings.real("data.eval_fraction");
  if (!data.eval_path.empty() && data.eval_fraction > 0)
    throw ConfigError(cat("data.eval_path (", settings.origin("data.eval_path"), ") and data.eval_fraction (",
                          settings.origin("data.eval_fraction"), ") both name held-out documents: keep one"));
  std::vector<std::string> keys = {"train.eval_every"};
  if (job == "dflash_train") keys.push_back("train.eval_speculate");
  for (const std::string& key : keys)
    if (settings.integer(key) > 0 && !data.has_eval())
      throw ConfigError(cat(key, " = ", settings.integer(key), " (", settings.origin(key),
                            ") has nothing to evaluate: set data.eval_path to a held-out dataset or data.eval_fraction "
                            "to the share of data.path to hold out"));
  return data;
}

// train.token_budget: a number, or "auto" with the memory the probe plans for;
// train.memory_fraction and train.memory_limit act only with "auto".
void token_budget_from(const Settings& settings, StepConfig& step) {
  step.auto_budget = settings.word("train.token_budget") == "auto";  // the schema's only word
  if (!step.auto_budget) step.token_budget = settings.integer("train.token_budget");
  step.memory_fraction = settings.real("train.memory_fraction");
  step.memory_limit = settings.integer("train.memory_limit");
  for (const char* key : {"train.memory_fraction", "train.memory_limit"})
    if (!step.auto_budget && settings.origin(key) != "default")
      throw ConfigError(cat(key, " (", settings.origin(key), ") only acts with train.token_budget = \"auto\", but "
                            "train.token_budget = ", step.token_budget, " (", settings.origin("train.token_budget"),
                            "): remove ", key, " or set train.token_budget = \"auto\""));
}

}  // namespace

model::ModelConfig model_config_from(const Settings& settings) {
  const double init_std = settings.real("model.init_std");
  if (settings.has("model.config")) {
    model::ModelConfig config = model::ModelConfig::from_json_file(settings.string("model.config"));
    // As HF: a config.json's initializer_range is the model's, unless the run sets its own.
    if (settings.origin("model.init_std") != "default") config.initializer_range = init_std;
    return config;
  }
  if (auto stored = config_of_weights(settings)) return *stored;  // trained weights: their own init is moot
  model::ModelConfig config = model::ModelConfig::preset(settings.string("model.preset"));
  config.initializer_range = init_std;
  return config;
}

LengthConfig length_config_from(const Settings& settings) {
  LengthConfig length;
  length.max_steps = settings.integer("train.max_steps");
  length.max_tokens = settings.integer("train.max_tokens");
  length.epochs = settings.integer("train.epochs");
  const std::string& schedule = settings.string("train.schedule");
  if (schedule == "steps") {
    if (length.max_steps == 0)
      throw ConfigError(cat("train.schedule = \"steps\" (", settings.origin("train.schedule"),
                            ") needs the schedule's length: set train.max_steps > 0, or use train.schedule = "
                            "\"run\""));
    length.schedule = ScheduleLength::steps;
  } else if (schedule == "tokens") {
    length.schedule = ScheduleLength::tokens;
  }
  return length;
}

LrConfig lr_config_from(const Settings& settings) {
  return LrConfig{settings.real("train.lr"), settings.real("train.min_lr_ratio"), settings.real("train.warmup")};
}

RunConfig read_run_config(const RunFile& run, const std::string& job) {
  const Settings& s = run.settings;
  RunConfig config;
  config.run_dir = run_directory(run);
  config.model = model_config_from(s);
  if (job == "dflash_train") {
    config.dflash = dflash_config_from(s, config.model);
    if (s.has("model.draft_weights")) config.draft_weights = s.string("model.draft_weights");
  }
  if (s.has("model.weights")) config.weights = s.string("model.weights");
  config.dtype = dtype_from(s);
  // moe_train's; the schema admits only these two.
  if (job == "moe_train" && s.string("model.expert_layout") == "expert_order")
    config.expert_layout = model::ExpertLayout::expert_order;

  config.data.path = s.has("data.path") ? s.string("data.path") : TOPOTRAIN_DEMO_DATASET;
  config.data.long_samples = data::parse_long_sample_policy(s.string("data.long_samples"));
  config.data.prefetch = static_cast<std::size_t>(s.integer("data.prefetch"));
  config.data = held_out_config_from(s, config.data, job);

  config.length = length_config_from(s);
  config.lr = lr_config_from(s);
  config.adamw = AdamWConfig{s.real("train.beta1"), s.real("train.beta2"), s.real("train.eps"),
                             s.real("train.weight_decay")};
  config.reducer.bucket_mb = s.real("train.bucket_mb");

  StepConfig& step = config.step;
  token_budget_from(s, step);
  step.grad_accum = static_cast<int>(s.integer("train.grad_accum"));
  step.clip = s.real("train.clip");
  step.skip_nonfinite = s.boolean("train.skip_nonfinite");
  // The schema admits only fail and shrink. An automatic budget knows what fits, so it shrinks
  // by its measure unless train.oom = "fail" is asked for.
  step.shrink_on_oom = s.string("train.oom") == "shrink" || (step.auto_budget && s.origin("train.oom") == "default");
  step.hang_timeout_s = s.real("train.hang_timeout_s");
  step.seed = static_cast<std::uint64_t>(s.integer("train.seed"));

  Cadences& cadences = config.cadences;
  cadences.log_every = s.integer("log.every");
  cadences.checkpoint_every = s.integer("checkpoint.every_steps");
  cadences.checkpoint_keep = s.integer("checkpoint.keep");
  cadences.checkpoint_pinned = s.boolean("checkpoint.pinned");
  cadences.timings_every = static_cast<int>(s.integer("log.timings_every"));
  cadences.profile = {s.integer("log.profile_step"), s.integer("log.profile_steps"), s.boolean("log.profile_host")};
  cadences.log_samples = s.boolean("log.samples");
  cadences.eval_every = s.integer("train.eval_every");
  if (job == "dflash_train") cadences.eval_speculate = s.integer("train.eval_speculate");
  cadences.tensorboard = s.boolean("log.tensorboard");
  config.log_level = parse_log_level(s.string("log.level"));
  config.log_all_ranks = s.boolean("log.all_ranks");
  return config;
}

}  // namespace topotrain
