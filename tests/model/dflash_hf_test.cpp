// The DFlash drafter's Hugging Face folder (model/dflash_hf.h): config.json's keys against the
// drafter's DFlashConfig one by one, the tensor names and shapes of the public layout written
// out from the config, sharding with an index, a save -> read -> load -> save round trip that
// is byte for byte, what it refuses, and the tap mapping: a target's tap i equals the output
// of the target cut after layer i, which is what target_layer_ids[i] names.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../config_error_text.h"
#include "../tiny_dflash_config.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/dflash_hf.h"
#include "topotrain/model/hf_checkpoint.h"
#include "topotrain/model/safetensors.h"

namespace mdl = topotrain::model;
using nlohmann::json;
using topotrain::cat;
using topotrain::join_path;
using topotrain::PackedBatch;
using topotrain::test_support::config_error_of;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

json read_json(const std::string& path) { return json::parse(read_bytes(path)); }

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The tensors of the public layout and their shapes, written out from the config.
std::map<std::string, std::vector<int64_t>> public_layout(const mdl::DFlashConfig& c) {
  const int64_t h = c.target.hidden_size, d = c.target.head_dim, i = c.target.intermediate_size;
  const int64_t q = c.target.num_attention_heads * d, kv = c.target.num_key_value_heads * d;
  std::map<std::string, std::vector<int64_t>> layout = {
      {"fc.weight", {h, static_cast<int64_t>(c.resolved_taps().size()) * h}},
      {"hidden_norm.weight", {h}},
      {"norm.weight", {h}},
  };
  for (int64_t n = 0; n < c.num_draft_layers; ++n) {
    const std::string p = cat("layers.", n, ".");
    layout[p + "input_layernorm.weight"] = {h};
    layout[p + "post_attention_layernorm.weight"] = {h};
    layout[p + "self_attn.q_proj.weight"] = {q, h};
    layout[p + "self_attn.k_proj.weight"] = {kv, h};
    layout[p + "self_attn.v_proj.weight"] = {kv, h};
    layout[p + "self_attn.o_proj.weight"] = {h, q};
    layout[p + "self_attn.q_norm.weight"] = {d};
    layout[p + "self_attn.k_norm.weight"] = {d};
    layout[p + "mlp.gate_proj.weight"] = {i, h};
    layout[p + "mlp.up_proj.weight"] = {i, h};
    layout[p + "mlp.down_proj.weight"] = {h, i};
  }
  return layout;
}

class DFlashHfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(3);
    dir_ = topotrain::make_temp_directory("dflash_hf_");
    config_ = topotrain::test_support::tiny_dflash_config();
    config_.taps = {1, 4, 6};
    config_.target.token_ids = {{"bos_token_id", {1}}, {"eos_token_id", {2, 3}}, {"pad_token_id", {0}}};
  }
  void TearDown() override { topotrain::remove_tree(dir_); }

  std::string path(const std::string& name) const { return join_path(dir_, name); }

  // A drafter whose every tensor differs from the others (the norms too).
  mdl::DFlashDrafter trained_drafter() {
    mdl::DFlashDrafter drafter(config_);
    torch::NoGradGuard no_grad;
    for (auto& p : drafter->parameters()) p.copy_(torch::randn(p.sizes()));
    drafter->target_norm.copy_(torch::rand({config_.target.hidden_size}) + 0.5);
    return drafter;
  }

  std::string dir_;
  mdl::DFlashConfig config_;
};

}  // namespace

TEST_F(DFlashHfTest, ConfigJsonCarriesEveryKeyOfThePublicFormat) {
  mdl::DFlashDrafter drafter = trained_drafter();
  mdl::save_dflash_hf(*drafter, path("out"), torch::kBFloat16, int64_t{1} << 30);
  const json doc = read_json(path("out/config.json"));
  const mdl::ModelConfig& t = config_.target;
  EXPECT_EQ(doc.at("architectures"), json::array({"DFlashDraftModel"}));
  EXPECT_EQ(doc.at("model_type"), "qwen3");
  EXPECT_EQ(doc.at("block_size"), config_.block_size);
  EXPECT_EQ(doc.at("num_target_layers"), t.num_hidden_layers);
  EXPECT_EQ(doc.at("dflash_config"), (json{{"mask_token_id", 63}, {"target_layer_ids", {1, 4, 6}}}));
  EXPECT_EQ(doc.at("num_hidden_layers"), config_.num_draft_layers);
  EXPECT_EQ(doc.at("layer_types"), json::array({"full_attention", "full_attention"}));
  EXPECT_EQ(doc.at("hidden_size"), 32);
  EXPECT_EQ(doc.at("intermediate_size"), 64);
  EXPECT_EQ(doc.at("num_attention_heads"), 4);
  EXPECT_EQ(doc.at("num_key_value_heads"), 2);
  EXPECT_EQ(doc.at("head_dim"), 8);
  EXPECT_EQ(doc.at("vocab_size"), 64);
  EXPECT_EQ(doc.at("rms_norm_eps"), t.rms_norm_eps);
  EXPECT_EQ(doc.at("rope_theta"), t.rope_theta);
  EXPECT_EQ(doc.at("rope_parameters").at("rope_theta"), t.rope_theta);
  EXPECT_TRUE(doc.at("rope_scaling").is_null());
  EXPECT_EQ(doc.at("max_position_embeddings"), t.max_position_embeddings);
  EXPECT_EQ(doc.at("tie_word_embeddings"), t.tie_word_embeddings);
  EXPECT_EQ(doc.at("initializer_range"), t.initializer_range);
  EXPECT_EQ(doc.at("hidden_act"), "silu");
  EXPECT_EQ(doc.at("attention_bias"), false);
  EXPECT_EQ(doc.at("attention_dropout"), 0.0);
  EXPECT_EQ(doc.at("use_sliding_window"), false);
  EXPECT_EQ(doc.at("use_cache"), true);
  EXPECT_EQ(doc.at("dtype"), "bfloat16");
  EXPECT_EQ(doc.at("bos_token_id"), 1);
  EXPECT_EQ(doc.at("eos_token_id"), json::array({2, 3}));

  // A MoE target's drafter is dense: its layers' keys say nothing of experts.
  config_.target.num_experts = 4, config_.target.num_experts_per_tok = 2, config_.target.moe_intermediate_size = 16;
  const json moe = json::parse(mdl::dflash_config_json(config_, "float32"));
  EXPECT_FALSE(moe.contains("num_experts"));
  EXPECT_EQ(moe.at("model_type"), "qwen3");
  EXPECT_EQ(moe.at("dtype"), "float32");
}

TEST_F(DFlashHfTest, TensorsHaveThePublicNamesAndShapesAndShardWithAnIndex) {
  mdl::DFlashDrafter drafter = trained_drafter();
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    SCOPED_TRACE(cat(dtype));
    const std::string out = path(cat("sharded-", dtype));
    const auto written = mdl::save_dflash_hf(*drafter, out, dtype, /*max_shard_bytes=*/8000);
    EXPECT_EQ(written.back(), join_path(out, "config.json"));
    const json index = read_json(join_path(out, "model.safetensors.index.json"));
    std::set<std::string> shards;
    std::map<std::string, std::vector<int64_t>> held;
    for (const auto& [name, shard] : index.at("weight_map").items()) {
      shards.insert(shard.get<std::string>());
      const mdl::SafetensorsFile file(join_path(out, shard.get<std::string>()));
      const mdl::SafetensorsEntry& entry = file.entries().at(name);
      EXPECT_EQ(entry.scalar_type, dtype) << name;
      held[name] = entry.shape;
    }
    EXPECT_GT(shards.size(), 1u);
    EXPECT_EQ(written.size(), shards.size() + 2);  // the shards, the index, config.json
    EXPECT_EQ(held, public_layout(config_));
  }
  // Below the shard size: one model.safetensors, no index.
  const auto single = mdl::save_dflash_hf(*drafter, path("single"), torch::kFloat32, int64_t{1} << 30);
  ASSERT_EQ(single.size(), 2u);
  EXPECT_EQ(single[0], join_path(path("single"), "model.safetensors"));
  EXPECT_FALSE(topotrain::file_exists(path("single/model.safetensors.index.json")));
}

TEST_F(DFlashHfTest, ReadsBackLoadsAndWritesTheSameBytes) {
  mdl::DFlashDrafter drafter = trained_drafter();
  const auto first = mdl::save_dflash_hf(*drafter, path("a"), torch::kFloat32, /*max_shard_bytes=*/8000);

  mdl::DFlashConfig read = mdl::read_dflash_hf_config(path("a"));
  EXPECT_EQ(read.source, path("a/config.json"));
  EXPECT_EQ(read.num_draft_layers, 2);
  EXPECT_EQ(read.block_size, 4);
  EXPECT_EQ(read.mask_token_id, 63);
  EXPECT_EQ(read.taps, (std::vector<int64_t>{1, 4, 6}));
  EXPECT_EQ(read.target.num_hidden_layers, 8);
  EXPECT_EQ(read.target.token_ids, config_.target.token_ids);
  EXPECT_EQ(read.target.eos_token_ids(), (std::vector<int64_t>{2, 3}));
  read.check_target(config_.target);
  read.target = config_.target;

  torch::manual_seed(77);  // other random weights, all overwritten
  mdl::DFlashDrafter loaded(read);
  mdl::load_dflash_hf(*loaded, path("a"));
  const auto originals = drafter->named_parameters();
  for (const auto& item : loaded->named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), originals[item.key()])) << item.key();
  EXPECT_TRUE(torch::equal(loaded->target_norm, drafter->target_norm));

  const auto second = mdl::save_dflash_hf(*loaded, path("b"), torch::kFloat32, /*max_shard_bytes=*/8000);
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(topotrain::file_name(first[i]), topotrain::file_name(second[i]));
    EXPECT_TRUE(read_bytes(first[i]) == read_bytes(second[i])) << first[i] << " differs from " << second[i];
  }

  // bf16: each weight rounded to the nearest bf16.
  mdl::save_dflash_hf(*drafter, path("bf16"), torch::kBFloat16, int64_t{1} << 30);
  mdl::load_dflash_hf(*loaded, path("bf16"));
  for (const auto& item : loaded->named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), originals[item.key()].to(torch::kBFloat16).to(torch::kFloat32)))
        << item.key();
}

TEST_F(DFlashHfTest, RefusesWhatIsNotThisDrafterNamingTheFileAndTheFix) {
  // A Qwen3 model's folder says what it is.
  mdl::CausalLM qwen(config_.target);
  mdl::save_hf_checkpoint(*qwen, path("qwen"));
  std::string message = config_error_of([&] { mdl::read_dflash_hf_config(path("qwen")); });
  EXPECT_NE(message.find(path("qwen/config.json") + " is the config of a Qwen3 model (architectures "
                                                    "[\"Qwen3ForCausalLM\"]): a target, not a drafter"),
            std::string::npos)
      << message;
  EXPECT_FALSE(mdl::is_dflash_hf_folder(path("qwen")));
  EXPECT_NE(config_error_of([&] { mdl::read_dflash_hf_config(path("nothing")); }).find("has no config.json"),
            std::string::npos);

  mdl::DFlashDrafter drafter = trained_drafter();
  mdl::save_dflash_hf(*drafter, path("d"), torch::kFloat32, int64_t{1} << 30);
  EXPECT_TRUE(mdl::is_dflash_hf_folder(path("d")));
  EXPECT_TRUE(mdl::is_dflash_hf_folder(path("d/model.safetensors")));
  // Its config is no model to build: ModelConfig refuses it.
  message = config_error_of([&] { mdl::ModelConfig::from_json_file(path("d/config.json")); });
  EXPECT_NE(message.find("is the config of a DFlash drafter"), std::string::npos) << message;

  // Variants of the format this drafter does not have, and missing keys.
  const json good = read_json(path("d/config.json"));
  auto refusal = [&](const std::function<void(json&)>& edit) {
    json doc = good;
    edit(doc);
    write_text(path("d/config.json"), doc.dump());
    return config_error_of([&] { mdl::read_dflash_hf_config(path("d")); });
  };
  EXPECT_NE(refusal([](json& d) { d["dflash_config"]["projector_type"] = "mlp"; })
                .find("dflash_config.projector_type = \"mlp\" is a DFlash variant"),
            std::string::npos);
  EXPECT_NE(refusal([](json& d) { d["layer_types"][1] = "sliding_attention"; }).find("'sliding_attention'"),
            std::string::npos);
  EXPECT_NE(refusal([](json& d) { d["dflash_config"].erase("mask_token_id"); }).find("needs 'mask_token_id'"),
            std::string::npos);
  EXPECT_NE(refusal([](json& d) { d.erase("block_size"); }).find("needs 'block_size'"), std::string::npos);
  EXPECT_NE(refusal([](json& d) { d["num_target_layers"] = "eight"; }).find("'num_target_layers' has the wrong type"),
            std::string::npos);
  EXPECT_NE(refusal([](json& d) { d["architectures"] = json::array({"LlamaForCausalLM"}); d["model_type"] = "llama"; })
                .find("a Llama model (architectures [\"LlamaForCausalLM\"]): a target, not a drafter"),
            std::string::npos);
  EXPECT_NE(refusal([](json& d) { d["architectures"] = json::array({"MistralForCausalLM"}); d["model_type"] = "mistral"; })
                .find("architectures [\"MistralForCausalLM\"], not a DFlash drafter"),
            std::string::npos);
  // Without target_layer_ids the public code's default taps apply, as here.
  write_text(path("d/config.json"), [&] {
    json doc = good;
    doc["dflash_config"].erase("target_layer_ids");
    return doc.dump();
  }());
  EXPECT_EQ(mdl::read_dflash_hf_config(path("d")).resolved_taps(), mdl::default_taps(8, 2));
  write_text(path("d/config.json"), good.dump());

  // Tensors of another shape, or one the drafter has none for, name the file and tensor.
  mdl::DFlashConfig wider = config_;
  wider.taps = {1, 4};
  mdl::DFlashDrafter other(wider);
  message = config_error_of([&] { mdl::load_dflash_hf(*other, path("d")); });
  EXPECT_NE(message.find(path("d/model.safetensors") + ": tensor 'fc.weight' has shape [32, 96] but the model "
                                                       "expects [32, 64]"),
            std::string::npos)
      << message;
  mdl::DFlashConfig shallower = config_;
  shallower.num_draft_layers = 1;
  mdl::DFlashDrafter one_layer(shallower);
  message = config_error_of([&] { mdl::load_dflash_hf(*one_layer, path("d")); });
  EXPECT_NE(message.find("unexpected tensor 'layers.1."), std::string::npos) << message;

  // A target of another shape than the drafter's is named with the field that differs.
  mdl::ModelConfig wide_target = config_.target;
  wide_target.hidden_size = 48;
  wide_target.source = "wide.json";
  message = config_error_of([&] { mdl::read_dflash_hf_config(path("d")).check_target(wide_target); });
  EXPECT_NE(message.find(path("d/config.json") + " is a drafter for a target of hidden_size 32, but wide.json has "
                                                 "hidden_size 48"),
            std::string::npos)
      << message;
}

// target_layer_ids[i] is read by the public code as HF's hidden_states[i + 1], the output of
// decoder layer i. Independent reference: the target cut after layer i (the first i + 1
// layers with the same weights) whose final hidden is its final norm of that output.
TEST_F(DFlashHfTest, TapIIsTheOutputOfLayerIAsTheExportNamesIt) {
  const mdl::ModelConfig& full_config = config_.target;
  mdl::CausalLM target(full_config);
  {
    torch::NoGradGuard no_grad;  // norms away from one, so that a wrong norm shows
    for (auto& item : target->named_parameters())
      if (item.key().find("norm") != std::string::npos) item.value().copy_(torch::rand(item.value().sizes()) + 0.5);
  }
  const auto batch = PackedBatch::from_documents({{3, 9, 27, 17, 51, 25}, {8, 40, 12}});
  std::vector<int64_t> all(static_cast<std::size_t>(full_config.num_hidden_layers));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  torch::NoGradGuard no_grad;
  const auto taps = target->forward_backbone(batch, all).taps;
  const auto norm = target->model->norm->weight;
  const auto params = target->named_parameters();
  for (int64_t layer = 0; layer < full_config.num_hidden_layers; ++layer) {
    SCOPED_TRACE(cat("layer ", layer));
    mdl::ModelConfig cut_config = full_config;
    cut_config.num_hidden_layers = layer + 1;
    mdl::CausalLM cut(cut_config);
    for (auto& item : cut->named_parameters()) item.value().copy_(params[item.key()]);
    const auto expected = cut->forward_backbone(batch).hidden;
    const auto& tap = taps[static_cast<std::size_t>(layer)];
    const auto by_hand = tap * torch::rsqrt(tap.pow(2).mean(-1, true) + full_config.rms_norm_eps) * norm;
    EXPECT_TRUE(torch::allclose(by_hand, expected, 1e-5, 1e-5)) << (by_hand - expected).abs().max().item<double>();
  }
  // The export names the taps as they are.
  EXPECT_EQ(json::parse(mdl::dflash_config_json(config_, "float32")).at("dflash_config").at("target_layer_ids"),
            json(config_.taps));
}
