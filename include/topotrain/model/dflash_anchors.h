// Anchors of a DFlash training step and the blocks that follow from them, on the host.
//
// A block starts at an anchor row a of a document: slot 0 holds token[a], slots 1..B-1 the
// mask token, and slot k is trained to predict token[a + k]. Everything here depends only on
// cu_seqlens, the loss mask and the anchors, so it is computed once per micro-batch on the
// host, before the forward, and the DFlash mask and the loss read it from there.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace topotrain::model {

struct DFlashBlocks {
  int64_t block_size = 0;
  // Row of each block's anchor in the packed batch. Blocks are grouped by document, in
  // document order, anchors ascending within a document.
  std::vector<int64_t> anchor_rows;
  // [docs + 1]: the blocks of document d are [document_blocks[d], document_blocks[d + 1]).
  std::vector<int64_t> document_blocks;
  std::vector<int64_t> document_begin;  // [docs]: first row of each document
  // Per block: how many context rows it attends to, the rows of its document strictly
  // before its anchor (anchor_row - document_begin).
  std::vector<int64_t> visible_context;
  // [blocks * B]: slot k of block i carries a loss: k >= 1, anchor + k is inside the
  // document and loss_mask[anchor + k] = 1.
  std::vector<uint8_t> slot_valid;

  int64_t num_blocks() const { return static_cast<int64_t>(anchor_rows.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(document_begin.size()); }
  int64_t num_valid_slots() const;
};

// Up to `max_per_document` anchors per document, drawn uniformly without replacement from
// the rows with loss_mask = 1 that have at least one following token in their document;
// all of them when there are fewer. `generator` (a CPU generator) advances, so calling again
// with the same generator resamples; a generator seeded alike gives the same anchors.
// cu_seqlens int32 [docs + 1] and loss_mask [T] (bool or integer) are read on the host
// (device tensors are copied, which synchronises).
DFlashBlocks sample_anchors(const torch::Tensor& cu_seqlens, const torch::Tensor& loss_mask, int64_t block_size,
                            int64_t max_per_document, at::Generator& generator);

// Blocks at given anchor rows (each must have a following token in its document); for
// tests and for evaluation at fixed anchors.
DFlashBlocks blocks_at(const torch::Tensor& cu_seqlens, const torch::Tensor& loss_mask, int64_t block_size,
                       std::vector<int64_t> anchor_rows);

}  // namespace topotrain::model
