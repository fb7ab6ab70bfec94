// Forward-path behaviour of the decoder (Qwen3, Qwen3-MoE, Llama, Qwen2) on CPU, each compared
// with an independent reference computation.
#include <cmath>
#include <set>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "expert_layout_check.h"
#include "../readme_listing.h"
#include "topotrain/core/error.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/config.h"
#include "topotrain/model/lm_loss.h"
#include "topotrain/model/model_cost.h"
#include "topotrain/model/moe.h"
#include "topotrain/model/rotary.h"

namespace mdl = topotrain::model;
using topotrain::PackedBatch;

namespace {

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(7);
  }
};

std::vector<std::vector<int64_t>> random_documents(const std::vector<int64_t>& lengths, int64_t vocab) {
  std::vector<std::vector<int64_t>> docs;
  for (int64_t len : lengths) {
    auto t = torch::randint(vocab, {len}, torch::kInt64);
    docs.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + len);
  }
  return docs;
}

// Tiny configs of the other families as their config.json files spell them.
mdl::ModelConfig tiny_llama() {
  return mdl::ModelConfig::from_json_text(
      R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12,
          "rope_theta": 500000.0, "attention_bias": false, "mlp_bias": false, "pretraining_tp": 1,
          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 64}})",
      "llama.json");
}

mdl::ModelConfig tiny_qwen2() {
  return mdl::ModelConfig::from_json_text(
      R"({"model_type": "qwen2", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": true,
          "use_sliding_window": false, "sliding_window": 4096, "max_window_layers": 2,
          "layer_types": ["full_attention", "full_attention"]})",
      "qwen2.json");
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double err = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
  EXPECT_LE(err, tol) << what << ": max abs difference " << err;
}

}  // namespace

TEST_F(ModelTest, PresetsHaveTheAdvertisedSizes) {
  const auto moe = mdl::count_parameters(mdl::ModelConfig::preset("moe-500m"));
  EXPECT_GE(moe.total, 480'000'000);
  EXPECT_LE(moe.total, 520'000'000);
  EXPECT_GE(moe.active, 310'000'000);
  EXPECT_LE(moe.active, 350'000'000);
  // Qwen3-0.6B's published count (tied embeddings): 596M.
  const auto small = mdl::count_parameters(mdl::ModelConfig::preset("qwen3-0.6b"));
  EXPECT_NEAR(static_cast<double>(small.total), 596e6, 2e6);
  for (const char* tiny : {"tiny-dense", "tiny-moe"}) EXPECT_GE(mdl::ModelConfig::preset(tiny).vocab_size, 512);
  EXPECT_THROW(mdl::ModelConfig::preset("tiny-mo"), topotrain::ConfigError);
}

TEST_F(ModelTest, ParameterCountMatchesTheModule) {
  for (const auto& config : {mdl::ModelConfig::preset("tiny-dense"), mdl::ModelConfig::preset("tiny-moe"),
                             tiny_llama(), tiny_qwen2()}) {
    mdl::CausalLM model(config);
    int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    EXPECT_EQ(n, mdl::count_parameters(model->config()).total) << config.source;
  }
}

// The families' switches, by the parameters HF's checkpoints of each hold.
TEST_F(ModelTest, FamiliesHaveTheirHfParameters) {
  auto names = [](const mdl::ModelConfig& config) {
    mdl::CausalLM model(config);
    std::set<std::string> layer0;
    for (const auto& item : model->named_parameters()) {
      if (item.key().rfind("model.layers.0.self_attn.", 0) == 0) layer0.insert(item.key().substr(25));
    }
    return layer0;
  };
  const std::set<std::string> projections = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"};
  auto with = [&](std::set<std::string> extra) {
    extra.insert(projections.begin(), projections.end());
    return extra;
  };
  EXPECT_EQ(names(mdl::ModelConfig::preset("tiny-dense")), with({"q_norm.weight", "k_norm.weight"}));
  EXPECT_EQ(names(tiny_llama()), projections);
  EXPECT_EQ(names(tiny_qwen2()), with({"q_proj.bias", "k_proj.bias", "v_proj.bias"}));
  EXPECT_EQ(tiny_qwen2().head_dim, 8);  // hidden / heads where config.json names none
  EXPECT_EQ(tiny_llama().head_dim, 12);
}

// HF's _compute_llama3_parameters: wavelengths 2 pi / f shorter than original / high_freq_factor
// keep their frequency, longer than original / low_freq_factor are divided by the factor, and
// those between blend the two with weight s = (original / wavelength - low) / (high - low).
TEST_F(ModelTest, Llama3RopeScalingKeepsStretchesAndBlendsByWavelength) {
  // head_dim 12 at theta 500000: wavelengths 6.3, 56, 497, ... meet all three bands of 16 and 64.
  const mdl::Llama3RopeScaling scaling{8.0, 1.0, 4.0, 64};
  const int64_t head_dim = 12;
  const auto plain = mdl::rope_inverse_frequencies(head_dim, 500000.0, std::nullopt, torch::kCPU).to(torch::kFloat64);
  const auto scaled = mdl::rope_inverse_frequencies(head_dim, 500000.0, scaling, torch::kCPU).to(torch::kFloat64);
  int kept = 0, stretched = 0, blended = 0;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double f = plain[i].item<double>(), wavelength = 2 * M_PI / f, got = scaled[i].item<double>();
    EXPECT_NEAR(f, 1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / head_dim), 1e-6 * f) << i;  // fp32
    if (wavelength < 64.0 / 4.0) {
      EXPECT_NEAR(got, f, 1e-7 * f) << i;
      ++kept;
    } else if (wavelength > 64.0 / 1.0) {
      EXPECT_NEAR(got, f / 8.0, 1e-7 * f) << i;
      ++stretched;
    } else {
      const double s = (64.0 / wavelength - 1.0) / (4.0 - 1.0);
      EXPECT_NEAR(got, (1 - s) * f / 8.0 + s * f, 1e-6 * f) << i;
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(stretched, 0);
  EXPECT_GT(blended, 0);
}

// A dense model's every weight is active: the backbone's FLOPs are 2 per parameter of the
// module less the embedding (a lookup), plus attention's score and value matmuls; the full
// forward adds the tied lm_head's product.
TEST_F(ModelTest, BackboneFlopsAreTheForwardsLessTheLmHead) {
  mdl::CausalLM model(mdl::ModelConfig::preset("tiny-dense"));
  const mdl::ModelConfig& c = model->config();
  ASSERT_TRUE(c.tie_word_embeddings);
  double weights = 0;
  for (const auto& named : model->named_parameters())
    if (named.key().find("embed_tokens") == std::string::npos) weights += static_cast<double>(named.value().numel());
  const double mean_document_tokens = 300;
  const double attention = 4.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads * c.head_dim) *
                           mean_document_tokens / 2;
  const double backbone = mdl::backbone_forward_flops_per_token(c, mean_document_tokens);
  EXPECT_DOUBLE_EQ(backbone, 2 * weights + attention);
  EXPECT_DOUBLE_EQ(mdl::forward_flops_per_token(c, mean_document_tokens),
                   backbone + 2.0 * static_cast<double>(c.vocab_size * c.hidden_size));
}

TEST_F(ModelTest, ConfigJsonReadsHfFieldsAndRefusesUnsupportedFeatures) {
  const auto c = mdl::ModelConfig::from_json_text(
      R"({"model_type": "qwen3_moe", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
          "moe_intermediate_size": 16, "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2,
          "decoder_sparse_step": 2, "mlp_only_layers": [3], "norm_topk_prob": false,
          "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0}})",
      "test.json");
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.rope_theta, 5000.0);
  // Sparse layers: (layer + 1) % 2 == 0 and not listed in mlp_only_layers.
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(3));
  const auto round_trip = mdl::ModelConfig::from_json_text(c.to_json_text(), "round trip");
  EXPECT_EQ(round_trip.to_json_text(), c.to_json_text());
  // transformers 5 saves num_experts as num_local_experts.
  const auto v5 = mdl::ModelConfig::from_json_text(
      R"({"model_type": "qwen3_moe", "num_hidden_layers": 3, "num_local_experts": 8, "num_experts_per_tok": 2,
          "moe_intermediate_size": 16, "mlp_only_layers": [1]})",
      "v5.json");
  EXPECT_EQ(v5.num_experts, 8);
  EXPECT_TRUE(v5.is_moe_layer(0));
  EXPECT_FALSE(v5.is_moe_layer(1));
  EXPECT_THROW(mdl::ModelConfig::from_json_text(R"({"attention_bias": true})", "x.json"), topotrain::ConfigError);
  EXPECT_THROW(mdl::ModelConfig::from_json_text("{oops", "x.json"), topotrain::ConfigError);
}

// What would change the maths and is not built is refused naming the key, in each family; the
// README lists the same keys.
TEST_F(ModelTest, ConfigJsonRefusesWhatItDoesNotBuildByName) {
  struct Refused {
    std::string key, text, message;
  };
  const std::vector<Refused> refused = {
      {"model_type", R"({"model_type": "mistral"})", "model_type 'mistral'"},
      {"model_type", R"({"model_type": "qwen2_moe"})", "model_type 'qwen2_moe'"},
      {"attention_bias", R"({"model_type": "llama", "attention_bias": true})", "attention_bias = true"},
      {"attention_bias", R"({"model_type": "qwen3", "attention_bias": true})", "attention_bias = true"},
      {"mlp_bias", R"({"model_type": "llama", "mlp_bias": true})", "mlp_bias = true"},
      {"rope_type", R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})",
       "rope_scaling.rope_type = 'yarn'"},
      {"rope_type", R"({"model_type": "qwen2", "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}})",
       "rope_parameters.rope_type = 'dynamic'"},
      {"hidden_act", R"({"model_type": "llama", "hidden_act": "gelu"})", "hidden_act = 'gelu'"},
      {"attention_dropout", R"({"model_type": "llama", "attention_dropout": 0.1})", "attention_dropout = 0.1"},
      {"quantization_config", R"({"model_type": "llama", "quantization_config": {"quant_method": "awq"}})",
       "quantization_config"},
      {"use_sliding_window", R"({"model_type": "qwen2", "use_sliding_window": true})", "use_sliding_window = true"},
      {"layer_types", R"({"model_type": "qwen2", "num_hidden_layers": 2, "layer_types": ["full_attention", "sliding_attention"]})",
       R"(layer_types entry "sliding_attention")"},
      {"partial_rotary_factor",
       R"({"model_type": "qwen3", "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}})",
       "partial_rotary_factor = 0.5"},
  };
  std::set<std::string> keys;
  for (const auto& [key, text, message] : refused) {
    keys.insert(key);
    try {
      mdl::ModelConfig::from_json_text(text, "x.json");
      ADD_FAILURE() << text << " was accepted";
    } catch (const topotrain::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("x.json"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(topotrain::test_support::readme_listing("Refused config.json keys:"), keys);
  // A Llama 3 rope_scaling without its four numbers is refused too, naming the one missing.
  EXPECT_THROW(mdl::ModelConfig::from_json_text(
                   R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})", "x.json"),
               topotrain::ConfigError);
}

// Each family's config.json reads back as the same model, under its own model_type and class.
TEST_F(ModelTest, FamilyConfigJsonRoundTrips) {
  for (const auto& [config, model_type, architecture] :
       {std::tuple{tiny_llama(), "llama", "LlamaForCausalLM"}, std::tuple{tiny_qwen2(), "qwen2", "Qwen2ForCausalLM"}}) {
    const auto doc = nlohmann::json::parse(config.to_json_text());
    EXPECT_EQ(doc.at("model_type"), model_type);
    EXPECT_EQ(doc.at("architectures")[0], architecture);
    const auto back = mdl::ModelConfig::from_json_text(config.to_json_text(), "round trip");
    EXPECT_TRUE(back.same_model(config)) << back.differences(config);
    EXPECT_EQ(back.to_json_text(), config.to_json_text());
  }
  const auto llama = tiny_llama();
  ASSERT_TRUE(llama.rope_scaling.has_value());
  EXPECT_EQ(llama.rope_scaling->original_max_position_embeddings, 64);
  // transformers 5's rope_parameters spelling reads as its earlier rope_scaling one.
  const auto v5 = mdl::ModelConfig::from_json_text(
      R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12,
          "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}})",
      "llama-v5.json");
  EXPECT_TRUE(v5.same_model(llama)) << v5.differences(llama);
  auto plain = llama;
  plain.rope_scaling.reset();
  EXPECT_FALSE(plain.same_model(llama));
  // As HF's LlamaConfig: bos 1 and eos 2 where config.json leaves them out, none where null.
  EXPECT_EQ(llama.token_ids.at("bos_token_id"), std::vector<int64_t>{1});
  EXPECT_EQ(llama.eos_token_ids(), std::vector<int64_t>{2});
  const auto no_eos = mdl::ModelConfig::from_json_text(R"({"model_type": "llama", "eos_token_id": null})", "x.json");
  EXPECT_TRUE(no_eos.eos_token_ids().empty());
  EXPECT_TRUE(tiny_qwen2().eos_token_ids().empty());
}

// Attention must not cross documents: a packed batch gives the same hidden states as the
// documents run one at a time.
TEST_F(ModelTest, PackedBatchEqualsDocumentsRunOneByOne) {
  for (const char* name : {"tiny-dense", "tiny-moe"}) {
    mdl::CausalLM model(mdl::ModelConfig::preset(name));
    const auto docs = random_documents({5, 9, 1, 7}, model->config().vocab_size);
    const auto packed = model->forward_backbone(PackedBatch::from_documents(docs));
    std::vector<torch::Tensor> single;
    for (const auto& doc : docs) single.push_back(model->forward_backbone(PackedBatch::from_documents({doc})).hidden);
    expect_close(packed.hidden, torch::cat(single, 0), 1e-5, name);
    // Documents of one length: the packed batch as a dense grid (what cuDNN's kernel gets on a GPU).
    const auto rows = random_documents({6, 6, 6}, model->config().vocab_size);
    const auto per_document = model->forward_backbone(PackedBatch::from_documents(rows)).hidden;
    model->force_attention_backend(mdl::AttentionBackend::dense_grid);
    expect_close(model->forward_backbone(PackedBatch::from_documents(rows)).hidden, per_document, 1e-5,
                 std::string(name) + " as a grid");
    model->force_attention_backend(std::nullopt);
  }
}

// A decoder layer is HF's pre-norm block, x -> h = x + attn(norm(x)) -> h + mlp(norm(h)), and a
// stream whose last add is still pending (fused into the next norm) means the same input.
TEST_F(ModelTest, DecoderLayerIsThePreNormBlockWithOrWithoutAPendingAdd) {
  for (const char* name : {"tiny-dense", "tiny-moe"}) {
    mdl::CausalLM model(mdl::ModelConfig::preset(name));
    const auto batch = PackedBatch::from_documents(random_documents({5, 3}, 512));
    const auto context = model->layer_context(batch);
    const int64_t last = model->config().num_hidden_layers - 1;  // an MoE layer in tiny-moe
    auto& layer = *model->layer(last);
    const auto x = torch::randn({8, model->config().hidden_size});
    const auto experts = mdl::ExpertBackend::sorted_loop;

    auto h = x + layer.self_attn(layer.input_layernorm(x), context, last);
    auto normed = layer.post_attention_layernorm(h);
    auto mlp = layer.sparse_mlp ? layer.sparse_mlp(normed, experts, nullptr) : layer.dense_mlp(normed);
    const auto expected = h + mlp;

    expect_close(layer.forward({x, {}}, context, experts, nullptr).value(), expected, 1e-5, name);
    const auto part = torch::randn_like(x);
    expect_close(layer.forward({x - part, part}, context, experts, nullptr).value(), expected, 1e-5,
                 std::string(name) + " pending");
  }
}

TEST_F(ModelTest, TapsAreTheOutputsOfThoseLayers) {
  mdl::CausalLM model(mdl::ModelConfig::preset("tiny-moe"));
  const auto batch = PackedBatch::from_documents(random_documents({6, 4}, 512));
  const auto out = model->forward_backbone(batch, {2, 0});
  ASSERT_EQ(out.taps.size(), 2u);

  // Reference: drive the layers by hand and keep every output.
  const auto context = model->layer_context(batch);
  auto x = model->model->embed_tokens(batch.tokens);
  std::vector<torch::Tensor> outputs;
  for (int64_t i = 0; i < model->config().num_hidden_layers; ++i) {
    x = model->layer(i)(mdl::ResidualStream{x, {}}, context, mdl::ExpertBackend::sorted_loop, nullptr).value();
    outputs.push_back(x);
  }
  EXPECT_TRUE(torch::equal(out.taps[0], outputs[2]));
  EXPECT_TRUE(torch::equal(out.taps[1], outputs[0]));
  EXPECT_TRUE(torch::equal(out.hidden, model->model->norm(outputs.back())));
  EXPECT_THROW(model->forward_backbone(batch, {3}), std::invalid_argument);
}

TEST_F(ModelTest, LogitsAtEqualsFullLogitsAtThoseRows) {
  for (const char* name : {"tiny-dense", "tiny-moe"}) {  // tied and untied lm_head
    mdl::CausalLM model(mdl::ModelConfig::preset(name));
    const auto out = model->forward_backbone(PackedBatch::from_documents(random_documents({8, 5}, 512)));
    const auto& weight = model->config().tie_word_embeddings ? model->model->embed_tokens->weight : model->lm_head->weight;
    const auto full = torch::matmul(out.hidden, weight.t());
    const auto rows = torch::tensor({0, 3, 12, 7}, torch::kInt64);
    expect_close(model->logits_at(out.hidden, rows), full.index_select(0, rows), 1e-6, name);
  }
}

TEST_F(ModelTest, ChunkedCrossEntropyEqualsNaive) {
  const auto hidden_ref = torch::randn({11, 16}, torch::requires_grad());
  const auto weight_ref = torch::randn({40, 16}, torch::requires_grad());
  const auto targets = torch::randint(40, {11}, torch::kInt64);
  auto naive = torch::nn::functional::cross_entropy(
      torch::matmul(hidden_ref, weight_ref.t()), targets,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  (naive * 0.5).backward();
  for (int64_t chunk : {1, 3, 11, 100}) {
    auto hidden = hidden_ref.detach().clone().requires_grad_();
    auto weight = weight_ref.detach().clone().requires_grad_();
    auto loss = mdl::linear_cross_entropy_sum(hidden, weight, targets, chunk);
    expect_close(loss, naive, 1e-4, "loss");
    (loss * 0.5).backward();
    expect_close(hidden.grad(), hidden_ref.grad(), 1e-5, "grad hidden");
    expect_close(weight.grad(), weight_ref.grad(), 1e-5, "grad weight");
  }
}

TEST_F(ModelTest, LmLossPredictsNextTokenWithinDocumentsOnly) {
  mdl::CausalLM model(mdl::ModelConfig::preset("tiny-dense"));
  const auto docs = random_documents({4, 1, 6}, 512);
  const auto batch = PackedBatch::from_documents(docs);
  const auto out = model->forward_backbone(batch);
  const auto loss = mdl::lm_loss(*model, out.hidden, batch, /*chunk_rows=*/2);
  EXPECT_EQ(loss.num_targets, 3 + 0 + 5);

  // Reference: full logits, targets gathered document by document.
  const auto logits = torch::matmul(out.hidden, model->model->embed_tokens->weight.t());
  torch::Tensor expected = torch::zeros({});
  int64_t begin = 0;
  for (const auto& doc : docs) {
    for (size_t i = 0; i + 1 < doc.size(); ++i) {
      const auto row = logits[begin + static_cast<int64_t>(i)];
      expected = expected + (row.logsumexp(0) - row[doc[i + 1]]);
    }
    begin += static_cast<int64_t>(doc.size());
  }
  expect_close(loss.loss_sum, expected, 1e-4, "loss sum");
}


TEST_F(ModelTest, LmLossTrainsOnlyTargetsWithLossMaskOne) {
  mdl::CausalLM model(mdl::ModelConfig::preset("tiny-moe"));
  const auto docs = random_documents({5, 2, 7}, 512);
  auto batch = PackedBatch::from_documents(docs);
  // 1 on every other token; a document's first token (mask 1 in the second document) is
  // no target of anything.
  batch.loss_mask = (torch::arange(batch.num_tokens()) % 2).to(torch::kUInt8);
  batch.summarize();  // the loss sizes its target rows by the host count
  batch.check();
  const auto hidden = model->forward_backbone(batch).hidden;
  const auto masked = mdl::lm_loss(*model, hidden, batch, /*chunk_rows=*/3);
  const auto logits = torch::matmul(hidden, model->lm_head->weight.t());
  torch::Tensor expected = torch::zeros({});
  int64_t begin = 0, targets = 0;
  for (const auto& doc : docs) {
    for (size_t i = 0; i + 1 < doc.size(); ++i) {
      const int64_t next = begin + static_cast<int64_t>(i) + 1;
      if (next % 2 == 0) continue;
      const auto row = logits[next - 1];
      expected = expected + (row.logsumexp(0) - row[doc[i + 1]]);
      ++targets;
    }
    begin += static_cast<int64_t>(doc.size());
  }
  EXPECT_EQ(masked.num_targets, targets);
  // Tokens 1, 3 | none (token 5 has mask 1 but starts its document) | 9, 11, 13.
  EXPECT_EQ(targets, 2 + 0 + 3);
  expect_close(masked.loss_sum, expected, 1e-4, "masked loss sum");
  batch.loss_mask = torch::Tensor();
  batch.summarize();
  EXPECT_GT((mdl::lm_loss(*model, hidden, batch).loss_sum - masked.loss_sum).abs().item<double>(), 1e-3);
  // A batch whose every token is masked out trains nothing and still has a loss (zero).
  batch.loss_mask = torch::zeros({batch.num_tokens()}, torch::kUInt8);
  batch.summarize();
  const auto none = mdl::lm_loss(*model, hidden, batch);
  EXPECT_EQ(none.num_targets, 0);
  EXPECT_EQ(none.loss_sum.item<double>(), 0.0);
  // A host count that disagrees with the mask is refused where it can be checked.
  batch.num_loss_targets = 1;
  EXPECT_THROW(mdl::lm_loss(*model, hidden, batch), std::logic_error);
}
// The sorted dispatch must equal the textbook definition: for every token, the weighted
// sum of its top-k experts' SwiGLU outputs.
TEST_F(ModelTest, SortedExpertDispatchEqualsPerTokenLoop) {
  for (bool norm_topk : {true, false}) {
    auto config = mdl::ModelConfig::preset("tiny-moe");
    config.norm_topk_prob = norm_topk;
    mdl::SparseMoeBlock block(config);
    const auto x_ref = torch::randn({13, config.hidden_size}, torch::requires_grad());
    auto x = x_ref.detach().clone().requires_grad_();
    mdl::RouterLoad load;
    auto y = block(x, mdl::ExpertBackend::sorted_loop, &load);

    const int64_t inter = config.moe_intermediate_size;
    auto probs = torch::softmax(torch::matmul(x_ref, block->gate->weight.t()), -1);
    std::vector<torch::Tensor> rows;
    for (int64_t t = 0; t < x_ref.size(0); ++t) {
      auto [w, idx] = probs[t].topk(config.num_experts_per_tok);
      if (norm_topk) w = w / w.sum();
      auto acc = torch::zeros({config.hidden_size});
      for (int64_t j = 0; j < config.num_experts_per_tok; ++j) {
        const int64_t e = idx[j].item<int64_t>();
        auto gate_up = block->experts->gate_up_proj[e];
        auto h = torch::silu(torch::mv(gate_up.narrow(0, 0, inter), x_ref[t])) *
                 torch::mv(gate_up.narrow(0, inter, inter), x_ref[t]);
        acc = acc + w[j] * torch::mv(block->experts->down_proj[e], h);
      }
      rows.push_back(acc);
    }
    auto reference = torch::stack(rows);
    expect_close(y, reference, 1e-5, "moe output");

    const auto upstream = torch::randn_like(reference);
    auto grads = torch::autograd::grad({(y * upstream).sum()}, {x, block->experts->gate_up_proj, block->gate->weight});
    auto grads_ref =
        torch::autograd::grad({(reference * upstream).sum()}, {x_ref, block->experts->gate_up_proj, block->gate->weight});
    for (size_t i = 0; i < grads.size(); ++i) expect_close(grads[i], grads_ref[i], 1e-5, "moe grad " + std::to_string(i));
    EXPECT_EQ(load.rows, 13);
    EXPECT_FLOAT_EQ(torch::stack(load.layer_counts).sum().item<float>(), 13.0f * config.num_experts_per_tok);
  }
}

// The busiest-first layout on the sorted loop (expert_layout_check.h).
TEST_F(ModelTest, BusiestFirstExpertLayoutEqualsExpertOrderBitForBit) {
  topotrain::model::test_support::expect_busiest_first_equals_expert_order(torch::kCPU,
                                                                           mdl::ExpertBackend::sorted_loop);
}

// Busiest first is the default and acts in a bf16-compute training forward (its blocks choose
// an order); with fp32 compute, or expert order set, the groups stay in expert order, and
// expert_layout() (what moe_train's start line names) says which runs.
TEST_F(ModelTest, BusiestFirstIsTheDefaultLayoutWhereItActs) {
  const auto batch = PackedBatch::from_documents(random_documents({7, 5}, 512));
  auto first_block_ordered = [&](torch::ScalarType compute, std::optional<mdl::ExpertLayout> layout) {
    mdl::CausalLM model(mdl::ModelConfig::preset("tiny-moe"));
    model->set_compute_dtype(compute);
    if (layout) model->set_expert_layout(*layout);
    model->forward_backbone(batch).hidden.to(torch::kFloat32).sum().backward();
    const auto block = model->layer(0)->sparse_mlp;
    EXPECT_TRUE(block);
    return std::make_pair(model->expert_layout(), block && block->group_experts().defined());
  };
  EXPECT_EQ(first_block_ordered(torch::kBFloat16, std::nullopt),
            std::make_pair(mdl::ExpertLayout::busiest_first, true));
  EXPECT_EQ(first_block_ordered(torch::kFloat32, std::nullopt), std::make_pair(mdl::ExpertLayout::expert_order, false));
  EXPECT_EQ(first_block_ordered(torch::kBFloat16, mdl::ExpertLayout::expert_order),
            std::make_pair(mdl::ExpertLayout::expert_order, false));
}

// HF's load_balancing_loss_func on a case worked by hand: 3 experts, top-2, two rows
// (in two "layers", which HF concatenates before averaging).
//   probs [0.5, 0.3, 0.2] -> experts {0, 1};  probs [0.1, 0.6, 0.3] -> experts {1, 2}
//   tokens_per_expert (summed over k) = [1, 2, 1] / 2, router_prob = [0.6, 0.9, 0.5] / 2
//   loss = 3 * (0.5 * 0.3 + 1.0 * 0.45 + 0.5 * 0.25) = 2.175
TEST_F(ModelTest, LoadBalancingLossMatchesHandComputedCase) {
  const auto probs = torch::tensor({{0.5f, 0.3f, 0.2f}, {0.1f, 0.6f, 0.3f}}).requires_grad_();
  mdl::RouterLoad load;
  for (int64_t layer = 0; layer < 2; ++layer) {
    auto row = probs.narrow(0, layer, 1);
    load.add(row, torch::bincount(std::get<1>(row.topk(2, -1)).reshape({-1}), {}, 3));
  }
  const auto loss = mdl::load_balancing_loss(load, 3);
  EXPECT_NEAR(loss.item<double>(), 2.175, 1e-6);
  loss.backward();
  // d loss / d p[r][e] = E * count_e / rows^2 = 3 * [1, 2, 1] / 4 for both rows.
  expect_close(probs.grad(), torch::tensor({{0.75f, 1.5f, 0.75f}, {0.75f, 1.5f, 0.75f}}), 1e-6, "aux grad");
  EXPECT_EQ(mdl::load_balancing_loss(mdl::RouterLoad{}, 3).item<float>(), 0.0f);
}

// Layer 0 sends 6 of 8 choices to expert 0 of 4 (mean 2): 3.0; layer 1 splits evenly: 1.0.
// The peak is the worse layer's, not the layers' sum ([7, 3, 3, 3] / 4 = 1.75) that the
// load-balancing loss reads.
TEST_F(ModelTest, PeakExpertLoadIsTheWorstLayersBusiestExpertOverTheMean) {
  const auto probs = torch::full({4, 4}, 0.25f);
  mdl::RouterLoad load;
  load.add(probs, torch::tensor({6, 1, 1, 0}));
  load.add(probs, torch::tensor({2, 2, 2, 2}));
  EXPECT_FLOAT_EQ(mdl::peak_expert_load(load).item<float>(), 3.0f);
  EXPECT_EQ(mdl::peak_expert_load(mdl::RouterLoad{}).item<float>(), 0.0f);
  mdl::RouterLoad empty;
  empty.add(probs.narrow(0, 0, 0), torch::zeros({4}, torch::kInt64));
  EXPECT_EQ(mdl::peak_expert_load(empty).item<float>(), 0.0f);  // no tokens: 0, not NaN
}

TEST_F(ModelTest, MoeBackboneReportsAuxLossAndDenseReportsZero) {
  mdl::CausalLM moe(mdl::ModelConfig::preset("tiny-moe"));
  const auto batch = PackedBatch::from_documents(random_documents({10, 6}, 512));
  const auto aux = moe->forward_backbone(batch).aux_loss;
  // Perfectly balanced routing gives exactly top_k = 2 (E * sum_e (k/E) * (1/E)); random
  // routing of a freshly initialised router stays near it.
  EXPECT_GT(aux.item<double>(), 1.0);
  EXPECT_LT(aux.item<double>(), 4.0);
  EXPECT_TRUE(aux.requires_grad());
  // Between an even split (1) and every token on the same experts (num_experts / top_k).
  const auto config = mdl::ModelConfig::preset("tiny-moe");
  const double load = moe->forward_backbone(batch).peak_expert_load.item<double>();
  EXPECT_GE(load, 1.0);
  EXPECT_LE(load, static_cast<double>(config.num_experts) / static_cast<double>(config.num_experts_per_tok));
  mdl::CausalLM dense(mdl::ModelConfig::preset("tiny-dense"));
  EXPECT_EQ(dense->forward_backbone(batch).aux_loss.item<double>(), 0.0);
  EXPECT_EQ(dense->forward_backbone(batch).peak_expert_load.item<double>(), 0.0);
}

TEST_F(ModelTest, BadPackedBatchIsRefused) {
  auto batch = PackedBatch::from_documents({{1, 2, 3}, {4, 5}});
  EXPECT_EQ(batch.sequence_lengths, (std::vector<int64_t>{3, 2}));
  EXPECT_NO_THROW(batch.check());
  auto wrong_lengths = batch;
  wrong_lengths.sequence_lengths = {2, 3};  // right sum and longest, wrong order
  EXPECT_THROW(wrong_lengths.check(), std::invalid_argument);
  wrong_lengths.sequence_lengths = {5};
  EXPECT_THROW(wrong_lengths.check(), std::invalid_argument);
  batch.max_seqlen = 2;
  EXPECT_THROW(batch.check(), std::invalid_argument);
  EXPECT_THROW(PackedBatch::from_documents({{1}, {}}), std::invalid_argument);
}
