#include "topotrain/model/packed_batch.h"

#include <stdexcept>

#include "topotrain/core/error.h"

namespace topotrain::model {

PackedBatch PackedBatch::from_documents(const std::vector<std::vector<int64_t>>& documents) {
  std::vector<int64_t> tokens, positions;
  std::vector<int32_t> cu{0};
  int64_t max_seqlen = 0;
  std::vector<int64_t> lengths;
  for (size_t d = 0; d < documents.size(); ++d) {
    const auto& doc = documents[d];
    if (doc.empty()) throw std::invalid_argument(cat("packed batch: document ", d, " is empty"));
    for (size_t i = 0; i < doc.size(); ++i) {
      tokens.push_back(doc[i]);
      positions.push_back(static_cast<int64_t>(i));
    }
    cu.push_back(static_cast<int32_t>(tokens.size()));
    max_seqlen = std::max<int64_t>(max_seqlen, static_cast<int64_t>(doc.size()));
    lengths.push_back(static_cast<int64_t>(doc.size()));
  }
  PackedBatch b;
  b.tokens = torch::tensor(tokens, torch::kInt64);
  b.positions = torch::tensor(positions, torch::kInt64);
  b.cu_seqlens = torch::tensor(cu, torch::kInt32);
  b.max_seqlen = max_seqlen;
  b.document_lengths = std::move(lengths);
  return b;
}

PackedBatch PackedBatch::to(const torch::Device& device) const {
  return {tokens.to(device),   positions.to(device), cu_seqlens.to(device),
          max_seqlen,          document_lengths,     loss_mask.defined() ? loss_mask.to(device) : torch::Tensor()};
}

void PackedBatch::check() const {
  auto fail = [](const std::string& what) { throw std::invalid_argument("packed batch: " + what); };
  if (!tokens.defined() || tokens.dim() != 1 || tokens.scalar_type() != torch::kInt64) fail("tokens must be int64 [T]");
  if (!positions.defined() || positions.sizes() != tokens.sizes() || positions.scalar_type() != torch::kInt64) {
    fail("positions must be int64 with the shape of tokens");
  }
  if (!cu_seqlens.defined() || cu_seqlens.dim() != 1 || cu_seqlens.size(0) < 2 ||
      cu_seqlens.scalar_type() != torch::kInt32) {
    fail("cu_seqlens must be int32 [docs + 1] with at least one document");
  }
  if (loss_mask.defined() && (loss_mask.sizes() != tokens.sizes() || loss_mask.scalar_type() != torch::kUInt8)) {
    fail("loss_mask must be uint8 with the shape of tokens");
  }
  if (!document_lengths.empty()) {
    const auto docs = static_cast<int64_t>(document_lengths.size());
    if (docs != num_documents()) fail(cat("document_lengths has ", docs, " entries for ", num_documents(), " documents"));
    int64_t sum = 0, longest = 0;
    for (int64_t len : document_lengths) sum += len, longest = std::max(longest, len);
    if (sum != tokens.size(0) || longest != max_seqlen) {
      fail(cat("document_lengths sum to ", sum, " tokens with the longest ", longest, ", the batch has ", tokens.size(0),
               " tokens and max_seqlen ", max_seqlen));
    }
  }
  if (!cu_seqlens.is_cpu()) return;  // reading a device tensor back would synchronise
  auto cu = cu_seqlens.accessor<int32_t, 1>();
  int64_t longest = 0;
  if (cu[0] != 0) fail("cu_seqlens[0] must be 0");
  for (int64_t d = 1; d < cu.size(0); ++d) {
    if (cu[d] <= cu[d - 1]) fail(cat("document ", d - 1, " is empty or cu_seqlens is not increasing"));
    longest = std::max<int64_t>(longest, cu[d] - cu[d - 1]);
    if (!document_lengths.empty() && document_lengths[d - 1] != cu[d] - cu[d - 1]) {
      fail(cat("document_lengths[", d - 1, "] is ", document_lengths[d - 1], " but cu_seqlens gives ", cu[d] - cu[d - 1]));
    }
  }
  if (cu[cu.size(0) - 1] != tokens.size(0)) fail("cu_seqlens must end at the number of tokens");
  if (longest != max_seqlen) fail(cat("max_seqlen is ", max_seqlen, " but the longest document has ", longest, " tokens"));
}

NextTokenTargets next_token_targets(const PackedBatch& batch) {
  const auto opts = batch.tokens.options();
  auto has_target = torch::ones({batch.num_tokens()}, opts.dtype(torch::kBool));
  auto last_of_document = batch.cu_seqlens.slice(0, 1).to(torch::kInt64) - 1;
  has_target.index_fill_(0, last_of_document, false);
  const int64_t n = batch.num_tokens();
  if (batch.loss_mask.defined() && n > 1) {
    has_target.narrow(0, 0, n - 1).logical_and_(batch.loss_mask.narrow(0, 1, n - 1));
  }
  auto rows = has_target.nonzero().squeeze(1);
  return {rows, batch.tokens.index_select(0, rows + 1)};
}

}  // namespace topotrain::model
