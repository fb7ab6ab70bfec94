// HeldOutEval (train/held_out_eval.h) against an independent reference: the loss of each
// held-out document computed alone, with no packing, summed over the documents and divided
// by their targets. Run on 1 and 3 ranks: every rank gets that mean whatever its share.
#include <mpi.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "topotrain/core/error.h"
#include "topotrain/model/lm_loss.h"
#include "topotrain/train/held_out_eval.h"

using namespace topotrain;

namespace {

struct Documents {
  std::vector<std::vector<std::int64_t>> tokens;
  std::vector<std::vector<std::uint8_t>> masks;
};

Documents documents(std::int64_t vocab) {
  Documents d;
  torch::manual_seed(21);
  for (std::int64_t length : {7, 3, 12, 5, 9, 2, 6}) {
    auto t = torch::randint(vocab, {length}, torch::kInt64);
    d.tokens.emplace_back(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + length);
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(length), 1);
    if (length > 4) mask[2] = mask[3] = 0;  // masked tokens are no target
    d.masks.push_back(mask);
  }
  return d;
}

std::shared_ptr<const data::TokenDataset> dataset_of(const Documents& d, std::uint64_t vocab) {
  data::TokenDatasetContents c;
  c.vocab_size = vocab;
  for (std::size_t i = 0; i < d.tokens.size(); ++i) {
    for (std::int64_t t : d.tokens[i]) c.tokens.push_back(static_cast<std::uint32_t>(t));
    c.loss_mask.insert(c.loss_mask.end(), d.masks[i].begin(), d.masks[i].end());
    c.offsets.push_back(c.tokens.size());
  }
  return std::make_shared<const data::TokenDataset>(data::TokenDataset::from_contents(std::move(c), "test"));
}

}  // namespace

TEST(HeldOutEval, MeanLossOverEveryTargetOfTheSetOnEveryRank) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const auto config = model::ModelConfig::preset("tiny-moe");
  torch::manual_seed(5);
  model::CausalLM net(config);
  const Documents docs = documents(config.vocab_size);

  RunConfig run;
  run.cadences.eval_every = 3;
  // A budget no document exceeds: the packer never splits one, so each is evaluated whole.
  HeldOutEval eval(dataset_of(docs, static_cast<std::uint64_t>(config.vocab_size)), run, /*token_budget=*/16, rank,
                   world, torch::kCPU);
  const HeldOutLoss got = eval.evaluate(*net, MPI_COMM_WORLD);

  torch::NoGradGuard no_grad;
  double sum = 0;
  std::uint64_t targets = 0;
  for (std::size_t i = 0; i < docs.tokens.size(); ++i) {
    PackedBatch batch = PackedBatch::from_documents({docs.tokens[i]});
    batch.loss_mask = torch::tensor(std::vector<std::int64_t>(docs.masks[i].begin(), docs.masks[i].end())).to(torch::kUInt8);
    batch.summarize();
    sum += model::lm_loss(*net, net->forward_backbone(batch).hidden, batch).loss_sum.item<double>();
    for (std::size_t k = 1; k < docs.masks[i].size(); ++k) targets += docs.masks[i][k];
  }
  EXPECT_EQ(got.targets, targets);
  EXPECT_EQ(got.documents, docs.tokens.size());
  EXPECT_NEAR(got.loss, sum / static_cast<double>(targets), 1e-5 * sum / static_cast<double>(targets));
}

TEST(HeldOutEval, DueEveryNStepsAndAfterTheLast) {
  const auto config = model::ModelConfig::preset("tiny-moe");
  const auto set = dataset_of(documents(config.vocab_size), static_cast<std::uint64_t>(config.vocab_size));
  RunConfig run;
  run.cadences.eval_every = 3;
  const HeldOutEval every3(set, run, 16, 0, 1, torch::kCPU);
  EXPECT_TRUE(every3.due(3, false));
  EXPECT_TRUE(every3.due(6, false));
  EXPECT_FALSE(every3.due(4, false));
  EXPECT_TRUE(every3.due(4, true));
  run.cadences.eval_every = 0;
  const HeldOutEval at_end(set, run, 16, 0, 1, torch::kCPU);
  EXPECT_FALSE(at_end.due(3, false));
  EXPECT_TRUE(at_end.due(5, true));
}

TEST(HeldOutEval, RefusesASetWithoutTargets) {
  data::TokenDatasetContents c;
  c.vocab_size = 16;
  c.tokens = {1, 2, 3};
  c.offsets = {0, 1, 2, 3};  // one-token documents: nothing to predict
  auto set = std::make_shared<const data::TokenDataset>(data::TokenDataset::from_contents(std::move(c), "ones"));
  RunConfig run;
  run.data.eval_path = "ones.h5";
  EXPECT_THROW(HeldOutEval(set, run, 16, 0, 1, torch::kCPU), ConfigError);
}
