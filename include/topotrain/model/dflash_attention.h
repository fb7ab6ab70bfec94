// The DFlash attention pattern: queries come from the blocks only; a block attends to the
// context rows of its own document strictly before its anchor and, bidirectionally, to its
// own B slots; never to another block or another document.
//
// The anchor's own context row is excluded, as in the public reimplementations: at inference
// the anchor is the token the target has just produced, whose hidden state does not exist yet;
// the anchor enters the block through its embedding in slot 0.
//
// Memory is proportional to what is computed: blocks are processed per document in chunks
// of consecutive (ascending) anchors, each chunk against the document's context prefix up to
// its last anchor. No [all block queries, all keys] tensor of a long row is formed.
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "topotrain/model/dflash_anchors.h"

namespace topotrain::model {

enum class DFlashAttentionBackend {
  // Scores per chunk, [heads, blocks, B, context + B], masked, fp32 softmax; any device and
  // dtype. Autograd keeps each chunk's probabilities for backward.
  math_chunked,
  // at::scaled_dot_product_attention per chunk with an additive mask of [chunk queries,
  // context + chunk block keys] (a fused kernel on CUDA, cuDNN's or the memory-efficient
  // one: only the log-sum-exp is kept for backward). Needs torch >= 2.1 (TOPOTRAIN_HAS_SDPA).
  sdpa_chunked,
};
std::string to_string(DFlashAttentionBackend backend);

// sdpa_chunked where this build has it and the tensors are CUDA half precision, else math.
DFlashAttentionBackend choose_dflash_attention_backend(const torch::Device& device, torch::ScalarType dtype);

struct DFlashAttentionOptions {
  DFlashAttentionBackend backend = DFlashAttentionBackend::math_chunked;
  // Bound on one chunk's queries x keys (per head): the math path materialises this many
  // scores per head. A chunk always holds at least one block.
  int64_t max_chunk_scores = int64_t{1} << 22;
  // Bound on one chunk's blocks for sdpa_chunked, whose mask also covers the chunk's
  // block-to-block square (wasted work grows with it).
  int64_t max_sdpa_chunk_blocks = 32;
  // sdpa_chunked: > 0 pads every chunk to max_sdpa_chunk_blocks blocks and its context to a
  // multiple of this many rows, so that chunk shapes repeat and cuDNN's attention (which
  // builds an execution plan per shape, ~9 ms on the host each) reuses its plans; 0 keeps
  // exact shapes and keeps cuDNN out (the memory-efficient kernel plans nothing).
  int64_t sdpa_context_multiple = 512;
};

// A chunk: blocks [first, last) of one document, against the first context_rows rows of
// that document.
struct DFlashAttentionChunk {
  int64_t first_block = 0, last_block = 0;
  int64_t document = 0;
  int64_t context_rows = 0;
};
// Greedy per document: a chunk grows while its blocks x B x (context + B) stays within
// max_scores and its block count within max_blocks.
std::vector<DFlashAttentionChunk> plan_dflash_chunks(const DFlashBlocks& blocks, int64_t max_scores,
                                                     int64_t max_blocks);

// q [N*B, Hq, D] (block slots, in block order), context_k/v [T, Hkv, D] (the packed rows),
// block_k/v [N*B, Hkv, D]; Hq a multiple of Hkv. Returns [N*B, Hq, D] in q's dtype.
torch::Tensor dflash_attention(const torch::Tensor& q, const torch::Tensor& context_k, const torch::Tensor& context_v,
                               const torch::Tensor& block_k, const torch::Tensor& block_v, const DFlashBlocks& blocks,
                               double scale, const DFlashAttentionOptions& options);

}  // namespace topotrain::model
