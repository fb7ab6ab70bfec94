// topotrain-export's library side (train/hf_export.h) and the model config that training
// checkpoints store: exports of tiny-moe and tiny-dense checkpoints load back into a fresh
// model equal (fp32) or within bf16 rounding, with HF's tensor names and a config.json that
// reads back field for field; what cannot be exported is refused with a message; and
// model.weights takes the model's shape from the checkpoint.
#include <gtest/gtest.h>

#include "../config_error_text.h"
#include <torch/torch.h>

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/data/tokenizer_files.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/hf_checkpoint.h"
#include "topotrain/model/safetensors.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/store/checkpoint_writer.h"
#include "topotrain/train/hf_export.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/trained_models.h"
#include "topotrain/train/training_checkpoint.h"

using namespace topotrain;
namespace mdl = topotrain::model;

namespace {

// Every field but `source`, one by one: independent of to_json_text, which a round trip
// through it could not check.
void expect_same_config(const mdl::ModelConfig& a, const mdl::ModelConfig& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.initializer_range, b.initializer_range);
  EXPECT_EQ(a.num_experts, b.num_experts);
  EXPECT_EQ(a.num_experts_per_tok, b.num_experts_per_tok);
  EXPECT_EQ(a.moe_intermediate_size, b.moe_intermediate_size);
  EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob);
  EXPECT_EQ(a.router_aux_loss_coef, b.router_aux_loss_coef);
  EXPECT_EQ(a.decoder_sparse_step, b.decoder_sparse_step);
  EXPECT_EQ(a.mlp_only_layers, b.mlp_only_layers);
}

// The tensor names of a Qwen3 / Qwen3-MoE model on the Hub, written out from the config.
std::set<std::string> hub_names(const mdl::ModelConfig& c) {
  std::set<std::string> names = {"model.embed_tokens.weight", "model.norm.weight"};
  if (!c.tie_word_embeddings) names.insert("lm_head.weight");
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = cat("model.layers.", layer, ".");
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                          "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm"})
      names.insert(p + n + ".weight");
    if (c.is_moe_layer(layer)) {
      names.insert(p + "mlp.gate.weight");
      for (int64_t e = 0; e < c.num_experts; ++e)
        for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
          names.insert(cat(p, "mlp.experts.", e, ".", proj, ".weight"));
    } else {
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) names.insert(cat(p, "mlp.", proj, ".weight"));
    }
  }
  return names;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

using topotrain::test_support::config_error_of;

class HfExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(11);
    dir_ = make_temp_directory("topotrain_export_");
  }
  void TearDown() override { remove_tree(dir_); }

  std::string path(const std::string& name) const { return join_path(dir_, name); }

  // What moe_train's checkpoint of `model` writes into run directory `run`: the
  // parameters, AdamW state and, unless `with_config` is false, the model's config.
  std::string write_run(mdl::CausalLM& model, const std::string& run, bool with_config = true,
                        const std::string& model_name = "",
                        std::shared_ptr<const data::TokenizerFiles> tokenizer_files = nullptr) {
    const NamedParameters parameters = named_parameters_of(*model);
    AdamW optimizer(parameters, AdamWConfig{});
    RunFile run_file;
    run_file.topology_text = "[topology]\nname = \"test\"\n";
    TrainingState state;
    state.step = 2;
    state.data_set.tokenizer_files = std::move(tokenizer_files);
    CheckpointState checkpoint = model_name.empty()
                                     ? snapshot(run_file, model->config(), parameters, optimizer, state)
                                     : snapshot(run_file, model_name, parameters, optimizer, state);
    if (!with_config) checkpoint.model_config_json.clear(), checkpoint.model_config_source.clear();
    CheckpointWriter writer(path(run), 3);
    writer.save(checkpoint);
    writer.wait();
    return path(run);
  }

  std::string dir_;
};

}  // namespace

TEST(ModelConfigJson, EveryPresetReadsBackFieldForField) {
  for (const std::string& name : mdl::ModelConfig::preset_names()) {
    SCOPED_TRACE(name);
    const mdl::ModelConfig preset = mdl::ModelConfig::preset(name);
    expect_same_config(mdl::ModelConfig::from_json_text(preset.to_json_text(), "round trip"), preset);
    const auto doc = nlohmann::json::parse(preset.to_json_text("bfloat16"));
    EXPECT_EQ(doc.at("model_type"), preset.is_moe() ? "qwen3_moe" : "qwen3");
    EXPECT_EQ(doc.at("architectures"), nlohmann::json::array({preset.is_moe() ? "Qwen3MoeForCausalLM"
                                                                              : "Qwen3ForCausalLM"}));
    EXPECT_EQ(doc.at("dtype"), "bfloat16");
    EXPECT_EQ(doc.at("rope_parameters").at("rope_theta"), preset.rope_theta);
    EXPECT_EQ(doc.contains("num_experts"), preset.is_moe());
  }
  mdl::ModelConfig other = mdl::ModelConfig::preset("tiny-moe");
  EXPECT_TRUE(other.same_model(mdl::ModelConfig::preset("tiny-moe")));
  other.rope_theta = 10000;
  EXPECT_FALSE(other.same_model(mdl::ModelConfig::preset("tiny-moe")));
}

TEST_F(HfExportTest, TinyModelsExportAndLoadBackEqualOrWithinBf16Rounding) {
  for (const std::string preset : {"tiny-moe", "tiny-dense"}) {
    mdl::CausalLM source(mdl::ModelConfig::preset(preset));
    const std::string run = write_run(source, preset);
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      SCOPED_TRACE(cat(preset, " ", dtype));
      HfExportOptions options;
      options.source = run;
      options.out_dir = path(cat(preset, "-hf-", dtype));
      options.dtype = dtype;
      options.max_shard_gib = 60e3 / (1024.0 * 1024.0 * 1024.0);  // shards of ~60 kB: an index
      const HfExportResult result = export_hf(options);
      EXPECT_EQ(result.checkpoint, join_path(run, "step-00000002.h5"));
      EXPECT_EQ(result.config.source, cat("model preset '", preset, "'"));
      ASSERT_GE(result.files.size(), 4u);
      for (const auto& [file, bytes] : result.files) EXPECT_EQ(file_size(file), bytes) << file;
      EXPECT_NE(describe(result).find(cat(result.files.size(), " files, ")), std::string::npos) << describe(result);

      // config.json: HF's fields, read back to the checkpoint's config.
      const std::string config_path = join_path(options.out_dir, "config.json");
      EXPECT_EQ(result.files.back().first, config_path);
      const mdl::ModelConfig exported = mdl::ModelConfig::from_json_file(config_path);
      expect_same_config(exported, source->config());
      EXPECT_EQ(nlohmann::json::parse(read_text(config_path)).at("dtype"),
                dtype == torch::kFloat32 ? "float32" : "bfloat16");

      // The index lists every tensor of the Hub's layout once, in a shard that holds it.
      const auto index = nlohmann::json::parse(read_text(join_path(options.out_dir, "model.safetensors.index.json")));
      const auto& weight_map = index.at("weight_map");
      const std::set<std::string> expected = hub_names(source->config());
      std::set<std::string> listed;
      std::map<std::string, std::set<std::string>> by_shard;
      for (const auto& [name, shard] : weight_map.items()) {
        listed.insert(name);
        by_shard[shard.get<std::string>()].insert(name);
      }
      EXPECT_EQ(listed, expected);
      EXPECT_EQ(weight_map.size(), expected.size());
      EXPECT_EQ(read_text(join_path(options.out_dir, "model.safetensors.index.json")).find("experts.gate_up_proj"),
                std::string::npos);
      EXPECT_EQ(by_shard.size() + 2, result.files.size());  // the shards, the index, config.json
      for (const auto& [shard, names] : by_shard) {
        const mdl::SafetensorsFile file(join_path(options.out_dir, shard));
        std::set<std::string> held;
        for (const auto& entry : file.entries()) {
          held.insert(entry.first);
          EXPECT_EQ(entry.second.scalar_type, dtype) << entry.first;
        }
        EXPECT_EQ(held, names) << shard;
      }

      // A fresh model (other random weights) loads the export back.
      torch::manual_seed(99);
      mdl::CausalLM loaded(exported);
      mdl::load_hf_checkpoint(*loaded, options.out_dir);
      const auto originals = source->named_parameters();
      for (const auto& item : loaded->named_parameters()) {
        const torch::Tensor& original = originals[item.key()];
        if (dtype == torch::kFloat32) {
          EXPECT_TRUE(torch::equal(item.value(), original)) << item.key();
        } else {
          // bf16 keeps 8 significant bits: round to nearest is within 2^-8 of the value.
          EXPECT_TRUE(torch::equal(item.value(), original.to(torch::kBFloat16).to(torch::kFloat32))) << item.key();
          EXPECT_TRUE(((item.value() - original).abs() <= original.abs() * (1.0 / 256)).all().item<bool>())
              << item.key();
        }
      }
    }
  }
}

TEST_F(HfExportTest, ARunDirectoryExportsItsNewestCheckpointUnsharded) {
  mdl::CausalLM source(mdl::ModelConfig::preset("tiny-moe"));
  const std::string run = write_run(source, "run");
  HfExportOptions options{run, path("hf")};
  const HfExportResult result = export_hf(options);
  ASSERT_EQ(result.files.size(), 2u);
  EXPECT_EQ(result.files[0].first, join_path(options.out_dir, "model.safetensors"));
  const mdl::SafetensorsCheckpoint saved(options.out_dir);
  EXPECT_EQ(saved.names().size(), hub_names(source->config()).size());
  EXPECT_EQ(saved.entry("model.layers.0.mlp.experts.7.down_proj.weight").scalar_type, torch::kBFloat16);
}

TEST_F(HfExportTest, RefusesWhatItCannotExportNamingWhy) {
  mdl::CausalLM model(mdl::ModelConfig::preset("tiny-moe"));
  auto export_error = [&](const std::string& source, const std::string& out) {
    return config_error_of([&] { export_hf(HfExportOptions{source, out}); });
  };
  EXPECT_NE(export_error(path("nowhere"), path("a")).find(path("nowhere") + " does not exist"), std::string::npos);
  make_directories(path("empty"));
  EXPECT_NE(export_error(path("empty"), path("a")).find("neither a topotrain checkpoint"), std::string::npos);
  make_directories(path("no-checkpoint"));
  std::ofstream(path("no-checkpoint/timings.h5")) << "x";
  EXPECT_NE(export_error(path("no-checkpoint"), path("a")).find("holds no complete checkpoint"), std::string::npos);

  const std::string old = write_run(model, "old", /*with_config=*/false);
  std::string message = export_error(old, path("a"));
  EXPECT_NE(message.find("stores no model config"), std::string::npos) << message;
  // A drafter's checkpoint from before drafter checkpoints stored their settings.
  const std::string drafter = write_run(model, "drafter", true, kDFlashDrafterModel);
  message = export_error(drafter, path("a"));
  EXPECT_NE(message.find("holds a DFlash drafter written by a topotrain older than drafter checkpoints that store "
                         "their settings"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("resume its run for one step"), std::string::npos) << message;
  EXPECT_FALSE(file_exists(path("a")));  // nothing written on refusal

  // A non-empty OUT_DIR needs --force, which replaces an earlier export and keeps other files.
  const std::string run = write_run(model, "run");
  make_directories(path("out"));
  std::ofstream(path("out/model-00009-of-00009.safetensors")) << "stale";
  std::ofstream(path("out/tokenizer.json")) << "{}";
  EXPECT_NE(export_error(run, path("out")).find("is not empty"), std::string::npos);
  HfExportOptions force{run, path("out")};
  force.force = true;
  export_hf(force);
  EXPECT_FALSE(file_exists(path("out/model-00009-of-00009.safetensors")));
  EXPECT_TRUE(file_exists(path("out/tokenizer.json")));
  EXPECT_TRUE(file_exists(path("out/model.safetensors")));
}

TEST_F(HfExportTest, ACheckpointWithoutAStoredConfigStillResumes) {
  mdl::CausalLM model(mdl::ModelConfig::preset("tiny-moe"));
  const std::string run = write_run(model, "old", /*with_config=*/false);
  const auto file = CheckpointReader::find_latest(run);
  ASSERT_TRUE(file);
  EXPECT_FALSE(stored_model_config(*file, CheckpointReader::load_header(*file)));
  torch::manual_seed(5);
  mdl::CausalLM resumed(mdl::ModelConfig::preset("tiny-moe"));
  const NamedParameters parameters = named_parameters_of(*resumed);
  AdamW optimizer(parameters, AdamWConfig{});
  TrainingState state;
  restore(CheckpointReader::load(*file, expectations_for(model->config().source, parameters, optimizer)), parameters,
          optimizer, state);
  EXPECT_EQ(state.step, 2);
  const auto originals = model->named_parameters();
  for (const auto& [name, p] : parameters) EXPECT_TRUE(torch::equal(p, originals[name])) << name;
}

TEST_F(HfExportTest, ModelWeightsGiveTheShapeWhenNoModelIsNamed) {
  mdl::CausalLM dense(mdl::ModelConfig::preset("tiny-dense"));
  const std::string run = write_run(dense, "dense");
  Settings settings;  // model.preset left at its default, tiny-moe
  settings.set("model.weights", run, "--set");
  const mdl::ModelConfig config = model_config_from(settings);
  EXPECT_EQ(config.source, "model preset 'tiny-dense'");
  expect_same_config(config, mdl::ModelConfig::preset("tiny-dense"));
  // A preset set anywhere must name the same model: one of another shape is refused naming
  // both and what differs; `--set model.preset=` takes it back.
  settings.set("model.preset", "tiny-moe", "topology/cpu4.toml:7:10");
  const std::string refused = config_error_of([&] { model_config_from(settings); });
  EXPECT_NE(refused.find("model.preset = \"tiny-moe\" (topology/cpu4.toml:7:10)"), std::string::npos) << refused;
  EXPECT_NE(refused.find("model preset 'tiny-dense'"), std::string::npos) << refused;
  EXPECT_NE(refused.find(": model_type \"qwen3_moe\" vs \"qwen3\", tie_word_embeddings false vs true (preset vs "
                         "weights)"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("--set model.preset="), std::string::npos) << refused;
  settings.set_from_assignment("model.preset=");
  EXPECT_EQ(settings.origin("model.preset"), "default");
  EXPECT_EQ(model_config_from(settings).source, "model preset 'tiny-dense'");
  // One that agrees builds the weights' model.
  settings.set("model.preset", "tiny-dense", "--set");
  expect_same_config(model_config_from(settings), mdl::ModelConfig::preset("tiny-dense"));
  // A checkpoint without a stored config builds the preset, as before.
  Settings old_settings;
  old_settings.set("model.weights", write_run(dense, "old", /*with_config=*/false), "--set");
  EXPECT_TRUE(model_config_from(old_settings).is_moe());
  // The weights themselves load into the model built from the stored config.
  mdl::CausalLM loaded(config);
  load_model_tensors(*CheckpointReader::checkpoint_at(run), named_parameters_of(*loaded));
  const auto originals = dense->named_parameters();
  for (const auto& item : loaded->named_parameters()) EXPECT_TRUE(torch::equal(item.value(), originals[item.key()]));
}

// An exported Hugging Face folder in model.weights gives the shape through its config.json, as
// a checkpoint does through its stored config: the fine-tune of an export names nothing else.
TEST_F(HfExportTest, AnHfFolderInModelWeightsGivesTheShapeFromItsConfig) {
  mdl::CausalLM dense(mdl::ModelConfig::preset("tiny-dense"));
  HfExportOptions options;
  options.source = write_run(dense, "dense");
  options.out_dir = path("exported");
  options.dtype = torch::kFloat32;
  export_hf(options);
  Settings settings;
  settings.set("model.weights", options.out_dir, "--set");
  const mdl::ModelConfig config = model_config_from(settings);
  EXPECT_EQ(config.source, join_path(options.out_dir, "config.json"));
  expect_same_config(config, mdl::ModelConfig::preset("tiny-dense"));
  settings.set("model.preset", "tiny-moe", "topology/cpu4.toml:7:10");
  EXPECT_NE(config_error_of([&] { model_config_from(settings); }).find(join_path(options.out_dir, "config.json")),
            std::string::npos);
}

// A model's export carries the tokenizer its training data stored, byte for byte, and
// generation_config.json with the ids generate stops at: the tokenizer's eos (a chat
// tokenizer's end of turn) first, then the config's; pad from the tokenizer where the config
// has none. Without either, the printout says what the folder lacks.
TEST_F(HfExportTest, AnExportCarriesItsTokenizerAndGenerationConfig) {
  mdl::ModelConfig config = mdl::ModelConfig::preset("tiny-dense");
  config.token_ids = {{"bos_token_id", {7}}, {"eos_token_id", {5, 6}}, {"decoder_start_token_id", {7}}};
  mdl::CausalLM dense(config);
  auto files = std::make_shared<data::TokenizerFiles>();
  (*files)["tokenizer.json"] = R"({"added_tokens": [{"id": 300, "content": "<|im_end|>"},
    {"id": 301, "content": "<|endoftext|>"}], "model": {"vocab": {"a": 0}}})";
  (*files)["tokenizer_config.json"] = R"({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})";
  (*files)["chat_template.jinja"] = "{{ messages }}";
  HfExportOptions options;
  options.source = write_run(dense, "with-tokenizer", true, "", files);
  options.out_dir = path("exported");
  const HfExportResult result = export_hf(options);
  for (const auto& [name, text] : *files) EXPECT_EQ(read_text(join_path(options.out_dir, name)), text) << name;
  const auto generation = nlohmann::json::parse(read_text(join_path(options.out_dir, "generation_config.json")));
  EXPECT_EQ(generation.at("eos_token_id"), nlohmann::json::array({300, 5, 6}));
  EXPECT_EQ(generation.at("bos_token_id"), 7);
  EXPECT_EQ(generation.at("pad_token_id"), 301);
  // config.json keeps every token-id key it was trained with.
  const auto exported = nlohmann::json::parse(read_text(join_path(options.out_dir, "config.json")));
  EXPECT_EQ(exported.at("eos_token_id"), nlohmann::json::array({5, 6}));
  EXPECT_EQ(exported.at("decoder_start_token_id"), 7);
  EXPECT_EQ(file_name(result.files.back().first), "config.json");
  EXPECT_TRUE(result.notes.empty());
  EXPECT_EQ(describe(result).find("note:"), std::string::npos);

  // Byte-tokenized data and a preset without ids: neither file, and the printout says so.
  mdl::CausalLM plain(mdl::ModelConfig::preset("tiny-dense"));
  options.source = write_run(plain, "plain");
  options.out_dir = path("exported-plain");
  const std::string printed = describe(export_hf(options));
  EXPECT_FALSE(file_exists(join_path(options.out_dir, "generation_config.json")));
  EXPECT_FALSE(file_exists(join_path(options.out_dir, "tokenizer.json")));
  EXPECT_NE(printed.find("note: no generation_config.json"), std::string::npos) << printed;
  EXPECT_NE(printed.find("note: no tokenizer files"), std::string::npos) << printed;
}

// An exported folder given as a target (topotrain-speculate's --target, greedy decoding) stops
// where transformers' generate stops: at generation_config.json's eos ids, which generate reads
// instead of config.json's; a preset's config.json names none, as in a chat model exported from
// one, whose responses then ran to --max-new-tokens.
TEST_F(HfExportTest, AnExportedTargetStopsWhereGenerateStops) {
  mdl::CausalLM dense(mdl::ModelConfig::preset("tiny-dense"));
  auto files = std::make_shared<data::TokenizerFiles>();
  (*files)["tokenizer.json"] = R"({"added_tokens": [{"id": 300, "content": "<|im_end|>"}], "model": {"vocab": {}}})";
  (*files)["tokenizer_config.json"] = R"({"eos_token": "<|im_end|>"})";
  HfExportOptions options;
  options.source = write_run(dense, "chat", true, "", files);
  options.out_dir = path("exported");
  export_hf(options);
  EXPECT_FALSE(nlohmann::json::parse(read_text(join_path(options.out_dir, "config.json"))).contains("eos_token_id"));
  EXPECT_EQ(target_config_at(options.out_dir).eos_token_ids(), std::vector<int64_t>{300});

  const std::string generation = join_path(options.out_dir, "generation_config.json");
  std::ofstream(generation) << R"({"eos_token_id": [3, 4], "pad_token_id": 0})";
  EXPECT_EQ(target_config_at(options.out_dir).eos_token_ids(), (std::vector<int64_t>{3, 4}));
  std::ofstream(generation) << R"({"pad_token_id": 0})";  // generate stops at no token
  EXPECT_TRUE(target_config_at(options.out_dir).eos_token_ids().empty());
  std::ofstream(generation) << R"({"eos_token_id": "<|im_end|>"})";
  const std::string message = config_error_of([&] { target_config_at(options.out_dir); });
  EXPECT_NE(message.find(generation + ": eos_token_id \"<|im_end|>\" is not a token id"), std::string::npos)
      << message;
}
