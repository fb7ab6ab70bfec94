// safetensors files and HF checkpoints: bit-exact round trips and the loading errors.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/hf_checkpoint.h"
#include "topotrain/model/safetensors.h"

namespace mdl = topotrain::model;

namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(3);
    dir_ = topotrain::make_temp_directory("topotrain_model_");
  }
  void TearDown() override { topotrain::remove_tree(dir_); }

  std::string path(const std::string& name) const { return topotrain::join_path(dir_, name); }

  // Expects loading `checkpoint` into a fresh tiny-moe to fail naming all of `pieces`.
  void expect_load_error(const std::string& checkpoint, const std::vector<std::string>& pieces) {
    mdl::CausalLM model(mdl::ModelConfig::preset("tiny-moe"));
    try {
      mdl::load_hf_checkpoint(*model, checkpoint);
      ADD_FAILURE() << "loading " << checkpoint << " did not fail";
    } catch (const topotrain::ConfigError& e) {
      for (const auto& piece : pieces) EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
    }
  }

  // The tiny-moe tensors in HF layout, as plain copies that a test may edit.
  mdl::NamedTensors tiny_moe_tensors() {
    mdl::CausalLM model(mdl::ModelConfig::preset("tiny-moe"));
    mdl::NamedTensors out;
    for (const auto& [name, view] : mdl::hf_tensor_views(*model)) out.emplace_back(name, view.detach().clone());
    return out;
  }

  std::string dir_;
};

}  // namespace

TEST_F(CheckpointTest, RoundTripIsBitExactForEveryDtype) {
  const mdl::NamedTensors tensors = {
      {"f32", torch::randn({3, 5})},
      {"bf16", torch::randn({7}).to(torch::kBFloat16)},
      {"f16", torch::randn({2, 2}).to(torch::kFloat16)},
      {"i64", torch::randint(1000, {4}, torch::kInt64)},
      {"scalar", torch::tensor(2.5f).reshape({})},
      {"strided", torch::randn({4, 6}).t()},
  };
  mdl::write_safetensors(path("a.safetensors"), tensors, {{"format", "pt"}});
  const mdl::SafetensorsFile file(path("a.safetensors"));
  ASSERT_EQ(file.entries().size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    const auto loaded = file.load(name);
    EXPECT_EQ(loaded.scalar_type(), tensor.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(loaded, tensor)) << name;
  }
}

TEST_F(CheckpointTest, ShardedCheckpointWritesAnIndexAndReadsBack) {
  const mdl::NamedTensors tensors = {{"a", torch::randn({64})}, {"b", torch::randn({64})}, {"c", torch::randn({64})}};
  mdl::write_safetensors_checkpoint(dir_, tensors, /*max_shard_bytes=*/300);
  EXPECT_TRUE(topotrain::file_exists(path("model.safetensors.index.json")));
  EXPECT_TRUE(topotrain::file_exists(path("model-00003-of-00003.safetensors")));
  const mdl::SafetensorsCheckpoint checkpoint(dir_);
  for (const auto& [name, tensor] : tensors) EXPECT_TRUE(torch::equal(checkpoint.load(name), tensor)) << name;
  EXPECT_NE(checkpoint.file_of("a"), checkpoint.file_of("c"));
}

TEST_F(CheckpointTest, HfExportUnstacksExpertsAndImportRestoresEveryParameter) {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    mdl::CausalLM source(mdl::ModelConfig::preset("tiny-moe"));
    mdl::save_hf_checkpoint(*source, dir_, dtype, /*max_shard_bytes=*/200'000);
    const mdl::SafetensorsCheckpoint saved(dir_);
    EXPECT_TRUE(saved.contains("model.layers.0.mlp.experts.7.up_proj.weight"));
    EXPECT_TRUE(saved.contains("model.layers.0.mlp.gate.weight"));
    EXPECT_TRUE(saved.contains("model.layers.1.mlp.gate_proj.weight"));  // the dense layer
    EXPECT_FALSE(saved.contains("model.layers.0.mlp.experts.gate_up_proj"));
    // HF stores the up projection of expert 7 as its own [I, H] matrix.
    const auto& stacked = source->model->layers->ptr<mdl::DecoderLayerImpl>(0)->sparse_mlp->experts->gate_up_proj;
    const int64_t inter = stacked.size(1) / 2;
    EXPECT_TRUE(torch::equal(saved.load("model.layers.0.mlp.experts.7.up_proj.weight"),
                             stacked[7].narrow(0, inter, inter).to(dtype)));

    mdl::CausalLM loaded(mdl::ModelConfig::from_json_file(path("config.json")));
    mdl::load_hf_checkpoint(*loaded, dir_);
    const auto expected = source->named_parameters();
    for (const auto& item : loaded->named_parameters()) {
      EXPECT_TRUE(torch::equal(item.value(), expected[item.key()].to(dtype).to(torch::kFloat32))) << item.key();
    }
    topotrain::remove_tree(dir_);
  }
}

TEST_F(CheckpointTest, MissingTensorIsNamed) {
  auto tensors = tiny_moe_tensors();
  tensors.erase(tensors.begin() + 3);
  const std::string missing = tiny_moe_tensors()[3].first;
  mdl::write_safetensors(path("m.safetensors"), tensors);
  expect_load_error(path("m.safetensors"), {path("m.safetensors"), missing, "missing"});
}

TEST_F(CheckpointTest, UnexpectedTensorIsNamed) {
  auto tensors = tiny_moe_tensors();
  tensors.emplace_back("model.layers.0.mlp.experts.8.gate_proj.weight", torch::zeros({32, 64}));
  mdl::write_safetensors(path("u.safetensors"), tensors);
  expect_load_error(path("u.safetensors"), {path("u.safetensors"), "experts.8.gate_proj", "unexpected"});
}

TEST_F(CheckpointTest, ShapeMismatchIsNamed) {
  auto tensors = tiny_moe_tensors();
  tensors[0].second = torch::zeros({511, 64});
  mdl::write_safetensors(path("s.safetensors"), tensors);
  expect_load_error(path("s.safetensors"), {path("s.safetensors"), tensors[0].first, "[511, 64]", "[512, 64]"});
}

TEST_F(CheckpointTest, DtypeMismatchIsNamed) {
  auto tensors = tiny_moe_tensors();
  tensors[1].second = tensors[1].second.to(torch::kInt64);
  mdl::write_safetensors(path("d.safetensors"), tensors);
  expect_load_error(path("d.safetensors"), {path("d.safetensors"), tensors[1].first, "I64"});
}

TEST_F(CheckpointTest, TruncatedFileIsNamed) {
  mdl::write_safetensors(path("t.safetensors"), tiny_moe_tensors());
  const auto size = static_cast<off_t>(topotrain::file_size(path("t.safetensors")));
  ASSERT_EQ(::truncate(path("t.safetensors").c_str(), size - 10), 0);
  expect_load_error(path("t.safetensors"), {path("t.safetensors"), "truncated", "lm_head.weight"});
  ASSERT_EQ(::truncate(path("t.safetensors").c_str(), 5), 0);
  expect_load_error(path("t.safetensors"), {path("t.safetensors"), "truncated"});
}

TEST_F(CheckpointTest, HeaderThatIsNotJsonIsNamed) {
  const std::string header = "{not json at all";
  std::ofstream out(path("h.safetensors"), std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header;
  out.close();
  expect_load_error(path("h.safetensors"), {path("h.safetensors"), "not JSON"});
}

TEST_F(CheckpointTest, IndexPointingAtTheWrongShardIsNamed) {
  mdl::write_safetensors(path("shard.safetensors"), {{"x", torch::zeros({2})}});
  std::ofstream(path("model.safetensors.index.json")) << R"({"weight_map": {"y": "shard.safetensors"}})";
  try {
    mdl::SafetensorsCheckpoint checkpoint(dir_);
    ADD_FAILURE() << "bad index accepted";
  } catch (const topotrain::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'y'"), std::string::npos) << e.what();
  }
}
