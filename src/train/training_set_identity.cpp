#include "topotrain/train/training_set_identity.h"

#include <vector>

#include "topotrain/core/crc32c.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/train/training_state.h"

namespace topotrain {

std::shared_ptr<const data::TokenizerFiles> stored_tokenizer_files(const std::string& path) {
  if (!is_regular_file(path)) return nullptr;  // a training set built in memory has no file to ask
  data::TokenizerFiles files = data::TokenDataset::stored_tokenizer_files(path);
  return files.empty() ? nullptr : std::make_shared<const data::TokenizerFiles>(std::move(files));
}

TrainingSetIdentity training_set_identity(const data::TokenDataset& train, const std::string& path) {
  std::vector<std::uint64_t> lengths(train.num_samples());
  for (std::uint64_t i = 0; i < lengths.size(); ++i) lengths[i] = train.sample_length(i);
  TrainingSetIdentity identity;
  identity.documents = static_cast<std::int64_t>(train.num_samples());
  identity.tokens = static_cast<std::int64_t>(train.num_tokens());
  identity.lengths_crc = crc32c(lengths.data(), lengths.size() * sizeof(std::uint64_t));
  if (const auto& crc = train.file_tokens_crc32c()) identity.tokens_crc = *crc;
  identity.path = path;
  identity.tokenizer_files = stored_tokenizer_files(path);
  return identity;
}

namespace {

// Known on both sides, and different.
bool differ(const std::optional<std::int64_t>& a, const std::optional<std::int64_t>& b) { return a && b && *a != *b; }

std::string describe(const TrainingSetIdentity& set) {
  std::string what = set.documents ? cat(*set.documents, " documents") : std::string();
  if (set.tokens) what += cat(what.empty() ? "" : " of ", *set.tokens, " tokens");
  return set.path.empty() ? what : cat(what, " (", set.path, ")");
}

}  // namespace

void adopt_training_set(TrainingState& state, const TrainingSetIdentity& mine, const RunConfig& config) {
  TrainingSetIdentity& trained = state.data_set;
  const bool lengths_differ = differ(trained.lengths_crc, mine.lengths_crc);
  const bool tokens_differ = differ(trained.tokens_crc, mine.tokens_crc);
  if (differ(trained.documents, mine.documents) || differ(trained.tokens, mine.tokens) || lengths_differ ||
      tokens_differ) {
    const bool held_out = config.data.eval_fraction > 0;
    throw ConfigError(cat(
        "the checkpoint resumed (step ", state.step, ") was trained on ", describe(trained),
        ", but this launch trains on ", describe(mine),
        held_out ? cat(" less data.eval_fraction = ", config.data.eval_fraction, " drawn by train.seed = ",
                       config.step.seed)
                 : std::string(),
        lengths_differ && trained.documents == mine.documents && trained.tokens == mine.tokens
            ? "; as many documents and tokens, but of other lengths: another file, or the file changed"
        : tokens_differ && !lengths_differ && trained.documents == mine.documents && trained.tokens == mine.tokens
            ? cat("; documents of the same lengths, but other tokens (token checksum ", *mine.tokens_crc, ", trained ",
                  *trained.tokens_crc, "): another file, or the file changed")
            : "",
        state.streams.empty()
            ? cat(". Its data position (sample ", state.data.consumed_samples, " of epoch ", state.data.epoch, ")")
            : cat(". The data positions of its ", state.streams.size(), " target streams"),
        " would skip or repeat samples: resume with the data.path",
        held_out ? ", data.eval_fraction and train.seed" : " and data.eval_fraction",
        " it was trained with, or start a new run from its weights (another checkpoint.run, with model.weights "
        "naming the checkpoint)"));
  }
  if (mine.documents) trained.documents = mine.documents;
  if (mine.tokens) trained.tokens = mine.tokens;
  if (mine.lengths_crc) trained.lengths_crc = mine.lengths_crc;
  if (mine.tokens_crc) trained.tokens_crc = mine.tokens_crc;
  trained.path = mine.path;
  trained.tokenizer_files = mine.tokenizer_files;
}

}  // namespace topotrain
