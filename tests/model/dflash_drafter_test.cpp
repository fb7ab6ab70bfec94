// The DFlash drafter on CPU: parameter names, the loss (CE and KL) and metrics against
// hand-built references, the mask end to end, target tensor loading, and a short training run.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <set>

#include "topotrain/model/dflash_drafter.h"
#include "topotrain/model/dflash_metrics.h"
#include "../tiny_dflash_config.h"

namespace mdl = topotrain::model;
using topotrain::PackedBatch;

namespace {

class DFlashDrafterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(5);
  }
};

mdl::DFlashConfig tiny_config(mdl::DFlashLoss loss = mdl::DFlashLoss::cross_entropy) {
  return topotrain::test_support::tiny_dflash_config(loss);
}

// Two documents of 10 and 6 tokens; loss mask 1 everywhere but row 4.
mdl::DFlashBatch tiny_batch(const mdl::DFlashConfig& c) {
  std::vector<std::vector<int64_t>> docs(2);
  for (int64_t i = 0; i < 10; ++i) docs[0].push_back((7 * i + 3) % 60);
  for (int64_t i = 0; i < 6; ++i) docs[1].push_back((5 * i + 1) % 60);
  mdl::DFlashBatch b;
  b.packed = PackedBatch::from_documents(docs);
  b.packed.loss_mask = torch::ones({16}, torch::kUInt8);
  b.packed.loss_mask[4] = 0;
  b.taps = torch::randn({16, 2 * c.target.hidden_size});
  b.final_hidden = torch::randn({16, c.target.hidden_size});
  return b;
}

struct Reference {
  torch::Tensor loss_sum;
  std::vector<int64_t> correct;
};

// Dense logits over every block slot, then the definition of the weighted loss.
Reference reference_loss(mdl::DFlashDrafterImpl& d, const mdl::DFlashBatch& batch, const mdl::DFlashBlocks& blocks) {
  const auto& c = d.config();
  auto hidden = d.forward_blocks(batch, blocks);
  auto normed = mdl::rms_norm(hidden, d.target_norm, c.target.rms_norm_eps);
  auto log_probs = torch::log_softmax(torch::matmul(normed, d.target_lm_head.t()), -1);
  auto teacher = torch::log_softmax(torch::matmul(batch.final_hidden, d.target_lm_head.t()), -1);
  Reference r{torch::zeros({}), std::vector<int64_t>(c.block_size, 0)};
  const int64_t B = c.block_size;
  for (int64_t i = 0; i < blocks.num_blocks(); ++i) {
    for (int64_t k = 1; k < B; ++k) {
      if (!blocks.slot_valid[i * B + k]) continue;
      const int64_t a = blocks.anchor_rows[i], label = batch.packed.tokens[a + k].item<int64_t>();
      const double w = std::exp(-(k - 1) / c.gamma);
      auto row = log_probs[i * B + k];
      if (c.loss == mdl::DFlashLoss::kl) {
        auto p = teacher[a + k - 1];
        r.loss_sum = r.loss_sum + w * (p.exp() * (p - row)).sum();
      } else {
        r.loss_sum = r.loss_sum - w * row[label];
      }
      r.correct[k] += row.argmax().item<int64_t>() == label;
    }
  }
  return r;
}

}  // namespace

TEST_F(DFlashDrafterTest, ParametersHaveStableNamesAndExcludeTheFrozenTarget) {
  mdl::DFlashDrafter d(tiny_config());
  std::set<std::string> names;
  int64_t count = 0;
  for (const auto& p : d->named_parameters()) names.insert(p.key()), count += p.value().numel();
  std::set<std::string> expected{"fc.weight", "hidden_norm.weight"};
  for (int layer = 0; layer < 2; ++layer) {
    const std::string l = "layers." + std::to_string(layer) + ".";
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                          "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      expected.insert(l + n + ".weight");
    }
  }
  EXPECT_EQ(names, expected);
  EXPECT_EQ(count, mdl::count_drafter_parameters(d->config()));
  std::set<std::string> buffers;
  for (const auto& b : d->named_buffers()) buffers.insert(b.key());
  EXPECT_EQ(buffers, (std::set<std::string>{"target_embed_tokens", "target_norm", "target_lm_head"}));
}

TEST_F(DFlashDrafterTest, WeightedCrossEntropyAndMetricsMatchTheDefinition) {
  mdl::DFlashDrafter d(tiny_config());
  const auto batch = tiny_batch(d->config());
  // Anchor 2: labels 3, 4 (loss mask 0), 5 -> slots 1 and 3. Anchor 7: labels 8, 9, then
  // the next document -> slots 1, 2. Anchor 11: labels 12..14 -> slots 1..3.
  const auto blocks = mdl::blocks_at(batch.packed.cu_seqlens, batch.packed.loss_mask, 4, {2, 7, 11});
  auto out = d->forward(batch, blocks);
  const double e = std::exp(-0.5), e2 = std::exp(-1.0);
  EXPECT_NEAR(out.weight_sum, (1 + e2) + (1 + e) + (1 + e + e2), 1e-12);
  EXPECT_EQ(out.slot_valid, (std::vector<int64_t>{0, 3, 2, 2}));
  EXPECT_EQ(out.num_blocks, 3);
  // What the trivial drafters count: each valid slot and the token at anchor + slot.
  const auto tokens = batch.packed.tokens;
  auto token = [&](int64_t row) { return tokens[row].item<int64_t>(); };
  EXPECT_TRUE(torch::equal(out.label_slots, torch::tensor({1, 3, 1, 2, 1, 2, 3}, torch::kInt64)));
  EXPECT_TRUE(torch::equal(out.labels, torch::tensor({token(3), token(5), token(8), token(9), token(12), token(13),
                                                      token(14)}, torch::kInt64)));

  auto ref = reference_loss(*d, batch, blocks);
  EXPECT_NEAR(out.loss_sum.item<double>(), ref.loss_sum.item<double>(), 1e-4);
  auto correct = out.slot_correct;
  EXPECT_EQ(std::vector<int64_t>(correct.data_ptr<int64_t>(), correct.data_ptr<int64_t>() + 4), ref.correct);

  // The chunked loss's gradient equals autograd through the dense reference.
  auto params = d->parameters();
  auto grads = torch::autograd::grad({out.loss_sum}, params);
  auto ref_grads = torch::autograd::grad({ref.loss_sum}, params);
  for (size_t i = 0; i < params.size(); ++i) {
    const double scale = ref_grads[i].abs().max().item<double>() + 1e-6;
    EXPECT_LE((grads[i] - ref_grads[i]).abs().max().item<double>() / scale, 1e-4) << "parameter " << i;
  }
  for (const auto* t : {&d->target_embed_tokens, &d->target_norm, &d->target_lm_head}) EXPECT_FALSE(t->requires_grad());
}

TEST_F(DFlashDrafterTest, KlLossAgainstTheTargetsNextTokenDistribution) {
  mdl::DFlashDrafter d(tiny_config(mdl::DFlashLoss::kl));
  const auto batch = tiny_batch(d->config());
  const auto blocks = mdl::blocks_at(batch.packed.cu_seqlens, batch.packed.loss_mask, 4, {0, 5, 8, 10, 13});
  auto out = d->forward(batch, blocks);
  auto ref = reference_loss(*d, batch, blocks);
  EXPECT_NEAR(out.loss_sum.item<double>(), ref.loss_sum.item<double>(), 1e-4);
  EXPECT_GT(out.loss_sum.item<double>(), 0.0);
  auto g = torch::autograd::grad({out.loss_sum}, {d->fc->weight})[0];
  auto ref_g = torch::autograd::grad({ref.loss_sum}, {d->fc->weight})[0];
  EXPECT_LE((g - ref_g).abs().max().item<double>(), 1e-4 * (ref_g.abs().max().item<double>() + 1e-6));

  auto no_teacher = batch;
  no_teacher.final_hidden = torch::Tensor();
  EXPECT_THROW(d->forward(no_teacher, blocks), std::invalid_argument);
}

TEST_F(DFlashDrafterTest, BlocksSeeOnlyTheirDocumentsContextBeforeTheAnchorAndThemselves) {
  mdl::DFlashDrafter d(tiny_config());
  torch::NoGradGuard no_grad;
  const auto batch = tiny_batch(d->config());
  const auto all = mdl::blocks_at(batch.packed.cu_seqlens, batch.packed.loss_mask, 4, {2, 6, 11});
  auto together = d->forward_blocks(batch, all);
  // Each block alone gives the same slots: blocks never see each other.
  const std::vector<int64_t> anchors{2, 6, 11};
  for (size_t i = 0; i < anchors.size(); ++i) {
    auto alone =
        d->forward_blocks(batch, mdl::blocks_at(batch.packed.cu_seqlens, batch.packed.loss_mask, 4, {anchors[i]}));
    EXPECT_LE((alone - together.narrow(0, 4 * i, 4)).abs().max().item<double>(), 1e-5) << "block " << i;
  }
  // Changing the context at and after anchor 6 of document 0, and all of document 1,
  // leaves block 6 alone; changing a row before it does not.
  auto changed = batch;
  changed.taps = batch.taps.clone();
  changed.taps.narrow(0, 6, 10).normal_();
  auto block6 = mdl::blocks_at(batch.packed.cu_seqlens, batch.packed.loss_mask, 4, {6});
  EXPECT_LE((d->forward_blocks(changed, block6) - together.narrow(0, 4, 4)).abs().max().item<double>(), 1e-5);
  changed.taps[5].normal_();
  EXPECT_GT((d->forward_blocks(changed, block6) - together.narrow(0, 4, 4)).abs().max().item<double>(), 1e-4);
}

TEST_F(DFlashDrafterTest, LoadsTheTargetsFrozenTensors) {
  auto config = tiny_config();
  config.target.tie_word_embeddings = true;
  mdl::CausalLM target(config.target);
  mdl::DFlashDrafter d(config);
  d->load_target_tensors(*target);
  EXPECT_TRUE(d->target_embed_tokens.equal(target->model->embed_tokens->weight));
  EXPECT_TRUE(d->target_lm_head.equal(target->model->embed_tokens->weight)) << "tied: the embedding";
  EXPECT_TRUE(d->target_norm.equal(target->model->norm->weight));
  try {
    d->load_target_tensors(torch::zeros({64, 32}), torch::ones({32}), torch::zeros({63, 32}));
    FAIL() << "a wrong lm_head shape must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight"), std::string::npos) << e.what();
  }
  d->set_compute_dtype(torch::kBFloat16);
  EXPECT_EQ(d->named_buffers()["target_lm_head"].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(d->fc->weight.scalar_type(), torch::kFloat32) << "parameters stay fp32 master weights";
}

TEST_F(DFlashDrafterTest, TrainingOnAFixedBatchLowersTheLossAndRaisesTau) {
  auto config = tiny_config();
  mdl::DFlashDrafter d(config);
  const auto batch = tiny_batch(config);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(99);
  torch::optim::Adam opt(d->parameters(), torch::optim::AdamOptions(3e-3));
  auto step = [&](bool train) {
    auto blocks = mdl::sample_anchors(batch.packed.cu_seqlens, batch.packed.loss_mask, 4, config.max_anchors, gen);
    auto out = d->forward(batch, blocks);
    auto loss = out.loss_sum / out.weight_sum;
    if (train) {
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    auto c = out.slot_correct;
    return std::make_pair(loss.item<double>(),
                          mdl::acceptance_length(mdl::slot_accuracy(
                              std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + 4), out.slot_valid)));
  };
  const auto before = step(false);
  for (int i = 0; i < 50; ++i) step(true);
  const auto after = step(false);
  EXPECT_LT(after.first, 0.5 * before.first) << "loss " << before.first << " -> " << after.first;
  EXPECT_GT(after.second, before.second) << "tau " << before.second << " -> " << after.second;
}
