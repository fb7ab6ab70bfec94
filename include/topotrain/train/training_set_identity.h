// What identifies the training set that a data position indexes, and the check that a
// resumed run trains on the set its checkpoint was trained on. A position counts samples of a
// permutation drawn over the set's documents, so another set of as many documents (another
// file, the same file edited, another held-out draw) would silently skip or repeat samples.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "topotrain/data/token_dataset.h"
#include "topotrain/data/tokenizer_files.h"
#include "topotrain/train/run_config.h"

namespace topotrain {

// Empty: not known (a fresh state, a checkpoint of an older topotrain, or a DFlash drafter
// that read only the dataset's header).
struct TrainingSetIdentity {
  std::optional<std::int64_t> documents;
  std::optional<std::int64_t> tokens;
  std::optional<std::int64_t> lengths_crc;  // CRC-32C of the documents' lengths, in order
  // CRC-32C of the tokens of the file the set was read from (TokenDataset::file_tokens_crc32c),
  // computed from the tokens read, not taken from the file's attribute: the same lengths with
  // other tokens are another set, also where the file's stored checksum was rewritten or dropped.
  std::optional<std::int64_t> tokens_crc;
  std::string path;                         // the data.path it was read from, for messages
  // The tokenizer files the set's dataset file stores (tokenizer_files.h), which checkpoints
  // record for topotrain-export; null where it stores none. Shared: states are copied.
  std::shared_ptr<const data::TokenizerFiles> tokenizer_files;
};

// TokenDataset::stored_tokenizer_files of `path`, null when it stores none or is no file.
std::shared_ptr<const data::TokenizerFiles> stored_tokenizer_files(const std::string& path);
// The identity of `train`, the documents of `path` a run trains on (less any held out), and
// the tokenizer files `path` stores.
TrainingSetIdentity training_set_identity(const data::TokenDataset& train, const std::string& path);

struct TrainingState;  // training_state.h, which holds an identity

// A resumed state's data position indexes the training set it was trained on: a launch
// whose set differs in what both identities know (another data.path, the file edited in
// place, another data.eval_fraction, or another train.seed drawing other held-out
// documents) would silently skip or repeat samples. Throws ConfigError naming both sets and
// the fix; then records what `mine` knows.
void adopt_training_set(TrainingState& state, const TrainingSetIdentity& mine, const RunConfig& config);

}  // namespace topotrain
