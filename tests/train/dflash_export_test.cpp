// A DFlash drafter leaving topotrain and coming back: drafter checkpoints store their
// settings, their target's config and final norm (and resume, also when written before they
// did); topotrain-export's library side writes the public DFlash folder from a drafter run;
// that folder (or the checkpoint) comes back through load_drafter_model and through
// dflash_train's model.draft_weights with the same weights, and exports again byte for byte;
// and every path named as the wrong kind of model is refused saying what it is.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "../config_error_text.h"
#include "../tiny_dflash_config.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/model/dflash_hf.h"
#include "topotrain/model/hf_checkpoint.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/store/checkpoint_writer.h"
#include "topotrain/train/hf_export.h"
#include "topotrain/train/run_config.h"
#include "topotrain/train/trained_models.h"
#include "topotrain/train/training_checkpoint.h"

using namespace topotrain;
namespace mdl = topotrain::model;
using nlohmann::json;
using test_support::config_error_of;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class DFlashExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(13);
    dir_ = make_temp_directory("dflash_export_");
    config_ = test_support::tiny_dflash_config(mdl::DFlashLoss::kl);
    config_.target.source = "target.json";
    config_.taps = {1, 4};
    config_.gamma = 3.5;
    config_.max_anchors = 5;
    target_ = mdl::CausalLM(config_.target);
    // The drafter as training leaves it: every parameter moved, and the target's final norm
    // (which the drafter holds frozen) not at one.
    {
      torch::NoGradGuard no_grad;
      target_->model->norm->weight.copy_(torch::rand({config_.target.hidden_size}) + 0.5);
    }
    drafter_ = mdl::DFlashDrafter(config_);
    drafter_->load_target_tensors(*target_);
    torch::NoGradGuard no_grad;
    for (auto& p : drafter_->parameters()) p.add_(torch::randn(p.sizes()) * 0.1);
  }
  void TearDown() override { remove_tree(dir_); }

  std::string path(const std::string& name) const { return join_path(dir_, name); }

  // Run directory `run` holding `checkpoint` at step 3.
  std::string save(CheckpointState checkpoint, const std::string& run) {
    checkpoint.step = 3;
    CheckpointWriter writer(path(run), 2);
    writer.save(checkpoint);
    writer.wait();
    return path(run);
  }
  // dflash_train's checkpoint of `drafter`, as the drafters write it.
  std::string save_drafter(mdl::DFlashDrafterImpl& drafter, const std::string& run,
                           const std::function<void(CheckpointState&)>& edit = {}) {
    const NamedParameters parameters = named_parameters_of(drafter);
    AdamW optimizer(parameters, AdamWConfig{});
    RunFile run_file;
    CheckpointState checkpoint = snapshot(run_file, drafter, parameters, optimizer, TrainingState{});
    if (edit) edit(checkpoint);
    return save(checkpoint, run);
  }

  HfExportResult export_to(const std::string& source, const std::string& out, double shard_kib = 1 << 20) {
    HfExportOptions options{source, path(out)};
    options.dtype = torch::kFloat32;
    options.max_shard_gib = shard_kib / (1024.0 * 1024.0);
    return export_hf(options);
  }

  void expect_same_weights(mdl::DFlashDrafterImpl& loaded) {
    const auto originals = drafter_->named_parameters();
    for (const auto& item : loaded.named_parameters())
      EXPECT_TRUE(torch::equal(item.value(), originals[item.key()])) << item.key();
    EXPECT_TRUE(torch::equal(loaded.target_norm, drafter_->target_norm));
  }

  std::string dir_;
  mdl::DFlashConfig config_;
  mdl::CausalLM target_{nullptr};
  mdl::DFlashDrafter drafter_{nullptr};
};

}  // namespace

TEST_F(DFlashExportTest, DrafterCheckpointsStoreWhatRebuildsThemAndResume) {
  const std::string run = save_drafter(*drafter_, "run");
  const std::string file = *CheckpointReader::checkpoint_at(run);
  const CheckpointState header = CheckpointReader::load_header(file);
  EXPECT_TRUE(holds_drafter(header));
  const auto stored = stored_drafter_config(file, header);
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->source, "checkpoint " + file);
  EXPECT_EQ(stored->num_draft_layers, 2);
  EXPECT_EQ(stored->block_size, 4);
  EXPECT_EQ(stored->taps, (std::vector<std::int64_t>{1, 4}));
  EXPECT_EQ(stored->mask_token_id, 63);
  EXPECT_EQ(stored->gamma, 3.5);
  EXPECT_EQ(stored->max_anchors, 5);
  EXPECT_EQ(stored->loss, mdl::DFlashLoss::kl);
  EXPECT_TRUE(stored->target.same_model(config_.target));
  EXPECT_EQ(stored->target.source, "target.json");

  // A resume expects the parameters and AdamW state only: the stored norm is not one.
  auto resume_into = [&](const std::string& from) {
    torch::manual_seed(4);
    mdl::DFlashDrafter fresh(config_);
    const NamedParameters parameters = named_parameters_of(*fresh);
    AdamW optimizer(parameters, AdamWConfig{});
    TrainingState state;
    restore(CheckpointReader::load(*CheckpointReader::checkpoint_at(from),
                                   expectations_for(kDFlashDrafterModel, parameters, optimizer)),
            parameters, optimizer, state);
    EXPECT_EQ(state.step, 3);
    const auto originals = drafter_->named_parameters();
    for (const auto& [name, p] : parameters) EXPECT_TRUE(torch::equal(p, originals[name])) << name;
  };
  resume_into(run);

  // One written before drafter checkpoints stored their settings: it still resumes, rebuilds
  // nothing, and leaves a loaded drafter's norm as it is.
  const NamedParameters parameters = named_parameters_of(*drafter_);
  AdamW optimizer(parameters, AdamWConfig{});
  const std::string old = save(snapshot(RunFile{}, kDFlashDrafterModel, parameters, optimizer, TrainingState{}), "old");
  resume_into(old);
  const std::string old_file = *CheckpointReader::checkpoint_at(old);
  EXPECT_FALSE(stored_drafter_config(old_file, CheckpointReader::load_header(old_file)));
  mdl::DFlashDrafter loaded(config_);
  EXPECT_FALSE(load_drafter_tensors(old_file, *loaded));
  EXPECT_TRUE(torch::equal(loaded->target_norm, torch::ones({config_.target.hidden_size})));
  EXPECT_TRUE(load_drafter_tensors(file, *loaded));
  expect_same_weights(*loaded);
}

TEST_F(DFlashExportTest, ExportsTheFolderThatComesBackEqualAndExportsAgainByteForByte) {
  const std::string run = save_drafter(*drafter_, "run");
  const HfExportResult result = export_to(run, "hf", /*shard_kib=*/8);
  ASSERT_TRUE(result.drafter);
  EXPECT_EQ(result.step, 3);
  EXPECT_GE(result.files.size(), 4u);  // shards, the index, config.json
  EXPECT_TRUE(file_exists(path("hf/model.safetensors.index.json")));

  // config.json against the checkpoint's drafter.
  const json doc = json::parse(read_bytes(path("hf/config.json")));
  EXPECT_EQ(doc.at("architectures"), json::array({"DFlashDraftModel"}));
  EXPECT_EQ(doc.at("dflash_config").at("target_layer_ids"), json::array({1, 4}));
  EXPECT_EQ(doc.at("dflash_config").at("mask_token_id"), 63);
  EXPECT_EQ(doc.at("block_size"), 4);
  EXPECT_EQ(doc.at("num_target_layers"), 8);
  EXPECT_EQ(doc.at("num_hidden_layers"), 2);
  EXPECT_EQ(doc.at("hidden_size"), 32);
  EXPECT_EQ(doc.at("dtype"), "float32");

  // What the tool prints: the mask token and what the taps read.
  const std::string text = describe(result);
  EXPECT_TRUE(contains(text, "(step 3, DFlashDraftModel: 2 layers, block 4, for a target of 8 layers trained as "
                             "target.json) as fp32:"))
      << text;
  EXPECT_TRUE(contains(text, "mask token: id 63 (dflash_config.mask_token_id)")) << text;
  EXPECT_TRUE(contains(text, "\"<|MASK|>\"")) << text;
  EXPECT_TRUE(contains(text, "must find it at id 63")) << text;
  EXPECT_TRUE(contains(text, "target_layer_ids: [1,4] (model.taps): the drafter reads the outputs of the target's "
                             "decoder layers 1,4 (0-based; HF's hidden_states[2], hidden_states[5])"))
      << text;

  // Back in through the loader, from the folder and from the run: the trained weights, the
  // stored norm, the target's embedding and lm_head.
  for (const std::string& from : {path("hf"), run}) {
    SCOPED_TRACE(from);
    torch::manual_seed(99);
    mdl::DFlashDrafter loaded = load_drafter_model(from, *target_);
    EXPECT_EQ(loaded->taps(), (std::vector<std::int64_t>{1, 4}));
    expect_same_weights(*loaded);
    EXPECT_TRUE(torch::equal(loaded->target_embed_tokens, target_->model->embed_tokens->weight));
    EXPECT_TRUE(torch::equal(loaded->target_lm_head, target_->model->embed_tokens->weight));  // tied
  }

  // Back in through model.draft_weights, trained (here: checkpointed) and exported again.
  std::ofstream(path("target.json")) << config_.target.to_json_text();
  RunFile run_file;
  run_file.topology.name = "test";
  run_file.settings.set("model.config", path("target.json"), "--set");
  run_file.settings.set("model.draft_weights", path("hf"), "--set");
  const RunConfig config = read_run_config(run_file, "dflash_train");
  EXPECT_EQ(config.draft_weights, path("hf"));
  ASSERT_TRUE(config.dflash);
  EXPECT_EQ(config.dflash->num_draft_layers, 2);
  EXPECT_EQ(config.dflash->block_size, 4);
  EXPECT_EQ(config.dflash->resolved_taps(), (std::vector<std::int64_t>{1, 4}));
  EXPECT_EQ(config.dflash->mask_token_id, 63);
  torch::manual_seed(98);
  mdl::DFlashDrafter imported(*config.dflash);
  imported->load_target_tensors(*target_);
  load_drafter_weights(config.draft_weights, *imported);
  expect_same_weights(*imported);
  const HfExportResult again = export_to(save_drafter(*imported, "imported"), "hf-again", /*shard_kib=*/8);
  ASSERT_EQ(again.files.size(), result.files.size());
  for (std::size_t i = 0; i < result.files.size(); ++i) {
    EXPECT_EQ(file_name(again.files[i].first), file_name(result.files[i].first));
    EXPECT_TRUE(read_bytes(again.files[i].first) == read_bytes(result.files[i].first)) << again.files[i].first;
  }
}

TEST_F(DFlashExportTest, DraftWeightsGiveTheDrafterShapeAndRefuseWhatDisagrees) {
  const std::string run = save_drafter(*drafter_, "run");
  std::ofstream(path("target.json")) << config_.target.to_json_text();
  auto settings_with = [&](const std::vector<std::string>& assignments) {
    RunFile run_file;
    run_file.topology.name = "test";
    run_file.settings.set("model.config", path("target.json"), "--set");
    run_file.settings.set("model.draft_weights", run, "--set");
    for (const std::string& assignment : assignments) run_file.settings.set_from_assignment(assignment);
    return run_file;
  };
  // Settings that repeat the drafter's values are taken; the run's own training settings stay its own.
  const RunConfig same = read_run_config(settings_with({"model.block_size=4", "model.taps=1,4", "train.gamma=2"}),
                                         "dflash_train");
  EXPECT_EQ(same.dflash->num_draft_layers, 2);
  EXPECT_EQ(same.dflash->gamma, 2.0);
  EXPECT_EQ(same.dflash->loss, mdl::DFlashLoss::cross_entropy);

  std::string message =
      config_error_of([&] { read_run_config(settings_with({"model.block_size=8"}), "dflash_train"); });
  EXPECT_TRUE(contains(message, "model.block_size = 8 (--set) but model.draft_weights = \"" + run +
                                    "\" (--set) holds a drafter of model.block_size 4: leave model.block_size unset"))
      << message;
  message = config_error_of([&] { read_run_config(settings_with({"model.taps=1,5"}), "dflash_train"); });
  EXPECT_TRUE(contains(message, "model.taps = \"1,5\" (--set) but")) << message;
  EXPECT_TRUE(contains(message, "holds a drafter of model.taps \"1,4\"")) << message;
  message = config_error_of([&] { read_run_config(settings_with({"model.mask_token_id=5"}), "dflash_train"); });
  EXPECT_TRUE(contains(message, "holds a drafter of model.mask_token_id 63")) << message;

  // A run whose target has another hidden size.
  mdl::ModelConfig wide = config_.target;
  wide.hidden_size = 48;
  std::ofstream(path("wide.json")) << wide.to_json_text();
  RunFile wide_run = settings_with({});
  wide_run.settings.set("model.config", path("wide.json"), "--set");
  message = config_error_of([&] { read_run_config(wide_run, "dflash_train"); });
  EXPECT_TRUE(contains(message, "model.draft_weights = \"" + run + "\" (--set): checkpoint ")) << message;
  EXPECT_TRUE(contains(message, "is a drafter for a target of hidden_size 32, but " + path("wide.json") +
                                    " has hidden_size 48"))
      << message;
}

TEST_F(DFlashExportTest, RefusesEachPathNamedAsTheWrongKindOfModel) {
  const std::string drafter_run = save_drafter(*drafter_, "drafter");
  export_to(drafter_run, "drafter-hf");
  // Qwen3 models: a dense target's run and folder, and a MoE run.
  const NamedParameters target_parameters = named_parameters_of(*target_);
  AdamW optimizer(target_parameters, AdamWConfig{});
  const std::string target_run =
      save(snapshot(RunFile{}, config_.target, target_parameters, optimizer, TrainingState{}), "target");
  mdl::save_hf_checkpoint(*target_, path("target-hf"));
  mdl::CausalLM moe(mdl::ModelConfig::preset("tiny-moe"));
  const NamedParameters moe_parameters = named_parameters_of(*moe);
  AdamW moe_optimizer(moe_parameters, AdamWConfig{});
  const std::string moe_run =
      save(snapshot(RunFile{}, moe->config(), moe_parameters, moe_optimizer, TrainingState{}), "moe");

  // A model named as the drafter says it is a model.
  for (const std::string& model_run : {target_run, moe_run}) {
    const std::string message = config_error_of([&] { load_drafter_model(model_run, *target_); });
    EXPECT_TRUE(contains(message, "', not a DFlash drafter: a Qwen3, Llama or Qwen2 model is a target")) << message;
  }
  std::string message = config_error_of([&] { load_drafter_model(path("target-hf"), *target_); });
  EXPECT_TRUE(contains(message, "is the config of a Qwen3 model (architectures [\"Qwen3ForCausalLM\"]): a target, not a "
                                "drafter"))
      << message;
  // A drafter named as the target says it is a drafter, and where drafters go.
  message = config_error_of([&] { load_target_model(drafter_run); });
  EXPECT_TRUE(contains(message, "holds a DFlash drafter, not a target model: name it where a drafter is asked for "
                                "(dflash_train's model.draft_weights")) << message;
  message = config_error_of([&] { load_target_model(path("drafter-hf")); });
  EXPECT_TRUE(contains(message, "is the config of a DFlash drafter")) << message;
  EXPECT_TRUE(contains(message, "model.draft_weights")) << message;
  message = config_error_of([&] { load_target_weights(path("drafter-hf"), *target_); });  // model.weights
  EXPECT_TRUE(contains(message, "(a DFlash folder) holds a DFlash drafter, not a target model")) << message;
  EXPECT_TRUE(contains(config_error_of([&] { load_target_model(path("nowhere")); }), "nowhere does not exist"));
  EXPECT_TRUE(contains(config_error_of([&] { load_drafter_model(path("nowhere"), *target_); }),
                       "nowhere does not exist; pass a DFlash drafter's folder"));
  // The target and its run load back as they were.
  mdl::CausalLM loaded = load_target_model(target_run);
  EXPECT_TRUE(torch::equal(loaded->model->norm->weight, target_->model->norm->weight));
  EXPECT_TRUE(load_target_model(path("target-hf"))->config().same_model(config_.target));

  // A target of another shape than the drafter's.
  mdl::ModelConfig wide = config_.target;
  wide.hidden_size = 48;
  wide.source = "wide target";
  mdl::CausalLM wide_target(wide);
  message = config_error_of([&] { load_drafter_model(path("drafter-hf"), *wide_target); });
  EXPECT_TRUE(contains(message, "config.json is a drafter for a target of hidden_size 32, but wide target has "
                                "hidden_size 48"))
      << message;
}

TEST_F(DFlashExportTest, RefusesToExportADrafterNoServingStackCouldRun) {
  auto export_error = [&](const std::string& run) { return config_error_of([&] { export_to(run, "out"); }); };
  // A mask token outside the target's vocabulary (a checkpoint whose stored id is 64 of 64).
  std::string message = export_error(
      save_drafter(*drafter_, "mask", [](CheckpointState& c) { c.ints["dflash_mask_token_id"] = 64; }));
  EXPECT_TRUE(contains(message, "the drafter's mask_token_id 64 is outside its target's vocabulary [0, 64)")) << message;
  EXPECT_TRUE(contains(message, "model.mask_token_id")) << message;
  EXPECT_FALSE(file_exists(path("out")));  // nothing written on refusal
  // A tap of the target's last layer, which HF hands out after its final norm.
  mdl::DFlashConfig last = config_;
  last.taps = {1, 7};
  mdl::DFlashDrafter last_tap(last);
  message = export_error(save_drafter(*last_tap, "last"));
  EXPECT_TRUE(contains(message, "the drafter taps the target's last layer (7)")) << message;
  EXPECT_TRUE(contains(message, "hidden_states[8]")) << message;
  // A drafter checkpoint from before they stored their settings.
  const NamedParameters parameters = named_parameters_of(*drafter_);
  AdamW optimizer(parameters, AdamWConfig{});
  message = export_error(save(snapshot(RunFile{}, kDFlashDrafterModel, parameters, optimizer, TrainingState{}), "old"));
  EXPECT_TRUE(contains(message, "written by a topotrain older than drafter checkpoints")) << message;
  EXPECT_TRUE(contains(message, "resume its run for one step with this topotrain (--resume PATH)")) << message;
}
