// Settings mapped onto components (run_config.h, run_setup.h, lr_schedule.h,
// training_set_identity.h): every key a job reads is consumed by its RunConfig, the random
// initialisation's std, the LR schedule's clock and length.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <vector>

#include "../config_error_text.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/settings.h"
#include "topotrain/train/run_config.h"
#include "topotrain/train/lr_schedule.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/training_set_identity.h"
#include "topotrain/train/training_state.h"

using namespace topotrain;
using test_support::config_error_of;

namespace {

// The std of the token embedding of a freshly initialised model.
double embedding_std(const model::ModelConfig& config) {
  torch::manual_seed(7);
  model::CausalLM net(config);
  for (const auto& item : net->named_parameters())
    if (item.key() == "model.embed_tokens.weight") return item.value().std().item<double>();
  ADD_FAILURE() << "no model.embed_tokens.weight";
  return 0;
}

std::string write_config_json(const std::string& dir, double initializer_range) {
  const std::string path = join_path(dir, "config.json");
  std::ofstream out(path);
  out << R"({"model_type": "qwen3", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,)"
      << R"( "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,)"
      << R"( "tie_word_embeddings": true, "initializer_range": )" << initializer_range << "}";
  return path;
}

RunConfig run_config_of(const Settings& settings, const std::string& job = "moe_train") {
  RunFile run;
  run.topology.name = "test";
  run.topology.source = "test.toml";
  run.settings = settings;
  return read_run_config(run, job);
}

}  // namespace

// A key in the schema that a job reads but its RunConfig does not take would do nothing;
// one it does not read must not be taken (the drafter's keys by moe_train).
TEST(RunConfig, EveryKeyAJobReadsIsConsumedAndNoOther) {
  for (const std::string job : {"moe_train", "dflash_train"}) {
    RunFile run;
    run.topology.name = "test";
    run.settings.set_from_assignment("model.taps=1");  // the default preset is too shallow for default taps
    read_run_config(run, job);
    for (const SettingSpec& spec : setting_specs())
      EXPECT_EQ(run.settings.was_read(spec.key), read_by_job(spec, job)) << job << " and " << spec.key;
  }
}

TEST(RunConfig, SettingsReachTheirConfigs) {
  Settings settings;
  for (const char* assignment : {"train.grad_accum=3", "train.clip=0.5", "train.oom=shrink", "log.every=7",
                                 "checkpoint.every_steps=-1", "model.dtype=fp32", "data.long_samples=truncate",
                                 "train.bucket_mb=4", "train.beta2=0.99", "log.samples=true", "model.taps=1"})
    settings.set_from_assignment(assignment);
  const RunConfig config = run_config_of(settings);
  EXPECT_EQ(config.step.grad_accum, 3);
  EXPECT_DOUBLE_EQ(config.step.clip, 0.5);
  EXPECT_TRUE(config.step.shrink_on_oom);
  EXPECT_EQ(config.cadences.log_every, 7);
  EXPECT_EQ(config.cadences.checkpoint_every, -1);
  EXPECT_TRUE(config.cadences.log_samples);
  EXPECT_EQ(config.dtype, DtypeChoice::fp32);
  EXPECT_EQ(config.data.long_samples, data::LongSamplePolicy::truncate);
  EXPECT_DOUBLE_EQ(config.reducer.bucket_mb, 4);
  EXPECT_DOUBLE_EQ(config.adamw.beta2, 0.99);
  EXPECT_FALSE(config.dflash.has_value());
  const RunConfig dflash = run_config_of(settings, "dflash_train");
  EXPECT_TRUE(dflash.dflash.has_value());
  EXPECT_TRUE(dflash.step.shrink_on_oom);
}

// 512 x 64 embedding values: the sample std is within a percent or two of the true one.
TEST(ModelConfigFrom, InitStdSetsTheRandomInitialisation) {
  for (double init_std : {0.02, 0.2}) {
    Settings settings;
    settings.set_from_assignment(cat("model.init_std=", init_std));
    const model::ModelConfig config = model_config_from(settings);
    EXPECT_DOUBLE_EQ(config.initializer_range, init_std);
    EXPECT_NEAR(embedding_std(config), init_std, 0.1 * init_std);
  }
}

TEST(ModelConfigFrom, ConfigJsonInitializerRangeWinsUnlessInitStdIsSet) {
  const std::string dir = make_temp_directory("run_setup_test");
  Settings settings;
  settings.set_from_assignment("model.config=" + write_config_json(dir, 0.1));
  const model::ModelConfig from_file = model_config_from(settings);
  EXPECT_DOUBLE_EQ(from_file.initializer_range, 0.1);
  EXPECT_NEAR(embedding_std(from_file), 0.1, 0.01);
  settings.set_from_assignment("model.init_std=0.3");
  EXPECT_DOUBLE_EQ(model_config_from(settings).initializer_range, 0.3);
  // Set to the default's value, it still is set: the run asked for it.
  settings.set_from_assignment("model.init_std=0.02");
  EXPECT_DOUBLE_EQ(model_config_from(settings).initializer_range, 0.02);
  remove_tree(dir);
}

TEST(TrainingLength, TokenScheduleRunsOverMaxTokensOrTheEpochs) {
  Settings settings;
  settings.set_from_assignment("train.schedule=tokens");  // the schedule before "run" was the default
  settings.set_from_assignment("train.epochs=3");
  settings.set_from_assignment("train.max_steps=10");
  TrainingLength length = training_length(length_config_from(settings), 1000);
  EXPECT_EQ(length.schedule, ScheduleLength::tokens);
  TrainingState state;
  state.step = 4;
  state.tokens = 123;
  EXPECT_EQ(length.schedule_point(state).length, 3000);  // max_steps only stops early
  EXPECT_EQ(length.describe(), "3 epoch(s) or 10 steps, whichever comes first; LR schedule over 3000 tokens");
  settings.set_from_assignment("train.max_tokens=500");
  length = training_length(length_config_from(settings), 1000);
  EXPECT_EQ(length.schedule_point(state).length, 500);
  EXPECT_EQ(length.schedule_point(state).position, 123);
}

// train.schedule = "run" (the default): the schedule ends with the limit that ends the run,
// each limit on its own clock, as HF Trainer's schedule ends at max_steps.
TEST(TrainingLength, RunScheduleEndsWhereTheRunEnds) {
  Settings settings;
  settings.set_from_assignment("train.epochs=3");
  settings.set_from_assignment("train.max_steps=10");
  settings.set_from_assignment("train.lr=1e-3");
  settings.set_from_assignment("train.min_lr_ratio=0.1");
  const TrainingLength length = training_length(length_config_from(settings), 1000);
  EXPECT_EQ(length.schedule, ScheduleLength::run);
  EXPECT_EQ(length.describe(),
            "3 epoch(s) or 10 steps, whichever comes first; LR schedule over the run: 10 steps, or 3000 tokens if "
            "they come first");
  const LrConfig lr = run_config_of(settings).lr;
  TrainingState state;
  // 100 tokens a step: max_steps (10 steps, 1000 tokens) ends the run long before the epochs.
  auto lr_at_step = [&](std::int64_t step) {
    state.step = step;
    state.tokens = 100 * step;
    return learning_rate(lr, length, state);
  };
  EXPECT_EQ(length.schedule_point(state).length, 10);
  EXPECT_NEAR(lr_at_step(10), 1e-4, 1e-15);  // the floor where max_steps ends the run
  EXPECT_LT(lr_at_step(9), 1e-4 + 0.03 * 0.9e-3);  // the last step trains within a step of it
  // The same run on the schedule of before (train.schedule = "tokens"): the last step is
  // still near the peak, 1/3 of the way through a schedule over 3 epochs.
  settings.set_from_assignment("train.schedule=tokens");
  const TrainingLength old = training_length(length_config_from(settings), 1000);
  state.step = 9;
  state.tokens = 900;
  EXPECT_GT(learning_rate(lr, old, state), 0.7e-3);
  EXPECT_NEAR(learning_rate(lr, old, state), (LrSchedule{1e-3, 0.1, 0.04, 3000}.at(900)), 1e-15);

  // 500 tokens a step: the epochs (3000 tokens, 6 steps) end first, and the tokens decide.
  state.step = 6;
  state.tokens = 3000;
  EXPECT_EQ(length.schedule_point(state).length, 3000);
  EXPECT_NEAR(learning_rate(lr, length, state), 1e-4, 1e-15);
  // max_tokens ends it first in tokens.
  settings.set_from_assignment("train.schedule=run");
  settings.set_from_assignment("train.max_tokens=200");
  const TrainingLength by_tokens = training_length(length_config_from(settings), 1000);
  state.step = 2;
  state.tokens = 200;
  EXPECT_EQ(by_tokens.schedule_point(state).length, 200);
  EXPECT_NEAR(learning_rate(lr, by_tokens, state), 1e-4, 1e-15);
}

// A resume that changes the schedule's length says what that does to the LR.
TEST(TrainingLength, ScheduleChangeGivesTheLrBeforeAndAfter) {
  Settings saved;
  saved.set_from_assignment("train.max_steps=10");
  saved.set_from_assignment("train.lr=1e-3");
  Settings now = saved;
  now.set_from_assignment("train.max_steps=20");
  const TrainingLength length = training_length(length_config_from(now), 1000000);
  TrainingState state;
  state.step = 10;
  state.tokens = 1000;
  EXPECT_EQ(schedule_change(saved, run_config_of(now), length, state),
            "LR at step 10: 1.00e-04 under the checkpoint's schedule (over the run: 10 steps, or 1000000 tokens if "
            "they come first) -> 5.79e-04 now (over the run: 20 steps, or 1000000 tokens if they come first)");
  EXPECT_EQ(schedule_change(now, run_config_of(now), length, state), "");
}

TEST(TrainingLength, StepScheduleEndsAtTheFloorAtMaxSteps) {
  Settings settings;
  settings.set_from_assignment("train.schedule=steps");
  settings.set_from_assignment("train.max_steps=10");
  settings.set_from_assignment("train.lr=1e-3");
  settings.set_from_assignment("train.min_lr_ratio=0.1");
  settings.set_from_assignment("train.warmup=0.2");
  const TrainingLength length = training_length(length_config_from(settings), 1000000);
  EXPECT_EQ(length.schedule, ScheduleLength::steps);
  EXPECT_EQ(length.describe(), "1 epoch(s) or 10 steps, whichever comes first; LR schedule over 10 steps");
  const LrConfig lr = run_config_of(settings).lr;
  TrainingState state;
  state.tokens = 2048;  // tokens do not move a step schedule
  auto lr_at_step = [&](std::int64_t step) {
    state.step = step;
    return learning_rate(lr, length, state);
  };
  EXPECT_NEAR(lr_at_step(2), 1e-3, 1e-15);   // warmup ends at 0.2 x 10 steps: the peak
  EXPECT_NEAR(lr_at_step(6), 0.55e-3, 1e-15);  // halfway through the cosine
  EXPECT_NEAR(lr_at_step(10), 1e-4, 1e-15);  // the floor at max_steps
  EXPECT_LT(lr_at_step(9), lr_at_step(8));
}

TEST(TrainingLength, StepScheduleNeedsMaxSteps) {
  Settings settings;
  settings.set_from_assignment("train.schedule=steps");
  try {
    length_config_from(settings);
    FAIL() << "a step schedule without max_steps was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.schedule = \"steps\" (--set) needs the schedule's length: set "
                                         "train.max_steps > 0"),
              std::string::npos)
        << e.what();
  }
}

TEST(RunConfig, HeldOutDocumentsComeFromOneSourceAndEvalEveryNeedsOne) {
  Settings settings;
  settings.set_from_assignment("data.eval_fraction=0.1");
  settings.set_from_assignment("train.eval_every=5");
  const RunConfig config = run_config_of(settings);
  EXPECT_DOUBLE_EQ(config.data.eval_fraction, 0.1);
  EXPECT_EQ(config.cadences.eval_every, 5);
  EXPECT_TRUE(config.data.has_eval());

  settings.set_from_assignment("data.eval_path=held.h5");
  EXPECT_THROW(run_config_of(settings), ConfigError);

  Settings nothing_to_evaluate;
  nothing_to_evaluate.set_from_assignment("train.eval_every=5");
  try {
    run_config_of(nothing_to_evaluate);
    ADD_FAILURE() << "train.eval_every without held-out documents was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("set data.eval_path"), std::string::npos) << e.what();
  }
  // dflash_train reads them too (its drafters evaluate the drafter), with the same checks.
  Settings dflash;
  dflash.set_from_assignment("model.taps=1");  // the default target has too few layers for default taps
  dflash.set_from_assignment("train.eval_every=4");
  try {
    run_config_of(dflash, "dflash_train");
    ADD_FAILURE() << "dflash_train: train.eval_every without held-out documents was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("set data.eval_path"), std::string::npos) << e.what();
  }
  dflash.set_from_assignment("data.eval_path=held.h5");
  const RunConfig drafted = run_config_of(dflash, "dflash_train");
  EXPECT_EQ(drafted.data.eval_path, "held.h5");
  EXPECT_EQ(drafted.cadences.eval_every, 4);
}

// A run directory is one folder of checkpoint.dir: never its root, never outside it.
TEST(RunConfig, RunDirectoryIsOneFolderUnderCheckpointDir) {
  Settings settings;
  settings.set_from_assignment("checkpoint.dir=/data/ckpt");
  EXPECT_EQ(run_config_of(settings).run_dir, "/data/ckpt/test");  // the topology's name
  settings.set_from_assignment("checkpoint.run=run1");
  EXPECT_EQ(run_config_of(settings).run_dir, "/data/ckpt/run1");
  for (const char* name : {"", ".", "..", "../elsewhere", "a/b"}) {
    settings.set("checkpoint.run", std::string(name), "--set");  // "" as a file may give it (`--set key=` clears)
    EXPECT_NE(config_error_of([&] { run_config_of(settings); })
                  .find(cat("checkpoint.run = \"", name, "\" (--set) does not name one folder under checkpoint.dir "
                            "(/data/ckpt): use a name without '/'")),
              std::string::npos)
        << name;
  }
  Settings unnamed;
  RunFile run;
  run.topology.source = "t.toml";  // name = "" in the topology file
  run.settings = unnamed;
  EXPECT_NE(config_error_of([&] { read_run_config(run, "moe_train"); })
                .find("the topology's name \"\" (t.toml; the run directory's name while checkpoint.run is unset) "
                      "does not name one folder"),
            std::string::npos);
}

// model.taps: each item a whole layer number, no layer twice; the block within the target's positions.
TEST(RunConfig, DflashTapsAreWholeLayerNumbersAndTheBlockFitsTheTarget) {
  Settings settings;
  settings.set_from_assignment("model.preset=tiny-dense");
  settings.set_from_assignment("model.taps= 1, 2");
  EXPECT_EQ(run_config_of(settings, "dflash_train").dflash->taps, (std::vector<int64_t>{1, 2}));
  for (const char* taps : {"1abc", "1.9", "1,,2", "-", ""}) {
    settings.set("model.taps", std::string(taps), "--set");
    EXPECT_NE(config_error_of([&] { run_config_of(settings, "dflash_train"); }).find("is not a layer number"),
              std::string::npos)
        << taps;
  }
  settings.set_from_assignment("model.taps=1,1");
  EXPECT_NE(config_error_of([&] { run_config_of(settings, "dflash_train"); }).find("tap layer 1 is listed twice"),
            std::string::npos);
  settings.set_from_assignment("model.taps=1");
  settings.set_from_assignment("model.block_size=2147483647");
  EXPECT_NE(config_error_of([&] { run_config_of(settings, "dflash_train"); })
                .find("block_size 2147483647 is larger than the target's max_position_embeddings"),
            std::string::npos);
}

// A document longer than the model's positions trains past them: said at load, with the fix;
// data.long_samples = "truncate" at a budget within the positions keeps it quiet.
TEST(LoadTrainingData, SaysWhenTrainingReachesPastTheModelsPositions) {
  const std::string dir = make_temp_directory("run_setup_positions");
  data::TokenDatasetContents contents;
  contents.vocab_size = 256;
  contents.eos_id = 0;
  contents.tokenizer = "byte";
  contents.tokens.assign(40, 7);
  contents.offsets = {0, 10, 40};  // documents of 10 and 30 tokens
  const std::string path = join_path(dir, "long.h5");
  data::write_token_dataset(path, contents);
  Settings settings;
  settings.set_from_assignment("data.path=" + path);
  settings.set_from_assignment("train.token_budget=16");
  RunConfig config = run_config_of(settings);
  config.model.max_position_embeddings = 24;
  testing::internal::CaptureStderr();
  load_training_data(config);
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find(cat("dataset ", path, ": its longest document has 30 tokens, so training reaches position 30 "
                          "(data.long_samples = \"split\" continues positions across a document's pieces), past the "
                          "model's max_position_embeddings (24)")),
            std::string::npos)
      << said;
  config.data.long_samples = data::LongSamplePolicy::truncate;
  testing::internal::CaptureStderr();
  load_training_data(config);
  said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(said.find("max_position_embeddings"), std::string::npos) << said;
  remove_tree(dir);
}

namespace {

// A dataset of documents of `lengths` tokens.
data::TokenDataset dataset_of(const std::vector<std::uint64_t>& lengths) {
  data::TokenDatasetContents contents;
  contents.vocab_size = 256;
  contents.eos_id = 0;
  contents.tokenizer = "byte";
  for (std::uint64_t length : lengths) {
    contents.offsets.push_back(contents.offsets.back() + length);
    contents.tokens.insert(contents.tokens.end(), length, 7);
  }
  return data::TokenDataset::from_contents(std::move(contents), "test");
}

}  // namespace

// A data position counts samples of a permutation over the training set's documents: a
// resume on another set of as many documents (another file, an edited one, another held-out
// draw) would skip and repeat samples without a word, so the set's lengths are compared too.
TEST(AdoptTrainingSet, RefusesAnotherSetOfAsManyDocumentsAndTokens) {
  Settings settings;
  const RunConfig config = run_config_of(settings);
  TrainingState state;
  adopt_training_set(state, training_set_identity(dataset_of({3, 5, 4}), "a.h5"), config);  // fresh: adopted
  EXPECT_EQ(state.data_set.documents, 3);
  EXPECT_EQ(state.data_set.tokens, 12);
  state.step = 7;
  state.data.consumed_samples = 2;
  // The same set under another path (the file moved) resumes.
  EXPECT_EQ(config_error_of([&] { adopt_training_set(state, training_set_identity(dataset_of({3, 5, 4}), "b.h5"),
                                                     config); }),
            "(no ConfigError)");
  const std::string error = config_error_of(
      [&] { adopt_training_set(state, training_set_identity(dataset_of({5, 3, 4}), "c.h5"), config); });
  EXPECT_NE(error.find("the checkpoint resumed (step 7) was trained on 3 documents of 12 tokens (b.h5), but this "
                       "launch trains on 3 documents of 12 tokens (c.h5); as many documents and tokens, but of other "
                       "lengths: another file, or the file changed. Its data position (sample 2 of epoch 0) would "
                       "skip or repeat samples: resume with the data.path and data.eval_fraction it was trained with"),
            std::string::npos)
      << error;
}

TEST(AdoptTrainingSet, ComparesWhatBothKnowAndNamesTheSeedOfAHeldOutDraw) {
  Settings settings;
  settings.set_from_assignment("data.eval_fraction=0.25");
  settings.set_from_assignment("train.seed=99");
  const RunConfig config = run_config_of(settings);
  // An older checkpoint knows the documents alone; a DFlash drafter without the data, the tokens.
  TrainingState state;
  state.data_set.documents = 3;
  TrainingSetIdentity header_only;
  header_only.tokens = 12;
  EXPECT_EQ(config_error_of([&] { adopt_training_set(state, header_only, config); }), "(no ConfigError)");
  EXPECT_EQ(state.data_set.documents, 3);
  EXPECT_EQ(state.data_set.tokens, 12);
  const std::string error = config_error_of(
      [&] { adopt_training_set(state, training_set_identity(dataset_of({3, 5, 5}), "a.h5"), config); });
  EXPECT_NE(error.find("but this launch trains on 3 documents of 13 tokens (a.h5) less data.eval_fraction = 0.25 "
                       "drawn by train.seed = 99. Its data position"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("resume with the data.path, data.eval_fraction and train.seed it was trained with"),
            std::string::npos)
      << error;
}
