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

// Both run per chunk over the same keys, [the chunk's context prefix, the chunk's block slots],
// with a mask of [chunk queries, those keys]; the block-to-block square is partly wasted work.
enum class DFlashAttentionBackend {
  // The plain-math attention (attention_math.h) with a boolean mask, exact shapes; any device
  // and dtype. Autograd keeps each chunk's probabilities for backward.
  math_chunked,
  // A fused attention kernel with an additive mask; only the log-sum-exp is kept for backward.
  // With bucketed shapes (sdpa_context_multiple > 0) cuDNN's, called directly with the grouped
  // k/v heads as they are (in a CUDA build); otherwise at::scaled_dot_product_attention on k/v
  // repeated per query head (its memory-efficient kernel takes no grouped k/v with a mask),
  // cuDNN kept out for exact shapes. On CPU the same call runs torch's CPU kernel (the CPU
  // tests' path).
  sdpa_chunked,
};
std::string to_string(DFlashAttentionBackend backend);

// sdpa_chunked where this build has it and the tensors are CUDA half precision, else math.
DFlashAttentionBackend choose_dflash_attention_backend(const torch::Device& device, torch::ScalarType dtype);

struct DFlashAttentionOptions {
  DFlashAttentionBackend backend = DFlashAttentionBackend::math_chunked;
  // Bound on one chunk's block queries x (context + B) keys (per head): the math path
  // materialises about this many scores per head. A chunk always holds at least one block.
  int64_t max_chunk_scores = int64_t{1} << 22;
  // Bound on one chunk's blocks: its mask also covers the chunk's block-to-block square
  // (wasted work grows with it).
  int64_t max_chunk_blocks = 32;
  // sdpa_chunked: > 0 pads every chunk to max_chunk_blocks blocks and its context to a
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

// What every layer's attention over one set of blocks shares: the chunks and their masks on
// the device. A drafter plans once per forward and its layers reuse the plan: each mask is
// about ten small kernels, and a plan per layer multiplied them (and the visible lengths' host
// copy) by the number of layers.
struct DFlashAttentionPlan {
  DFlashAttentionOptions options;
  int64_t block_size = 0, num_blocks = 0;
  std::vector<DFlashAttentionChunk> chunks;
  std::vector<int64_t> document_begin;  // each document's first context row
  // Per chunk, [queries, keys] of its (padded) shape: additive in `dtype` for sdpa_chunked, bool
  // (true where hidden) for math_chunked.
  std::vector<torch::Tensor> masks;
  torch::Device device = torch::kCPU;  // where, and in which dtype, the queries must be
  torch::ScalarType dtype = torch::kFloat32;
};
// `like`: the device and dtype of the queries the plan will serve.
DFlashAttentionPlan plan_dflash_attention(const DFlashBlocks& blocks, const DFlashAttentionOptions& options,
                                          const torch::TensorOptions& like);

// Each chunk's keys (or values) as its attention reads them: [chunk context rows, zero rows up
// to the chunk's padded context, the chunk's block slots, zero rows up to its padded queries]
// (padded only where DFlashAttentionOptions::sdpa_context_multiple says), from the whole context
// [T, Hkv, D] and block [N*B, Hkv, D] tensors. Differentiable: its backward adds every chunk's
// gradient into one gradient of each input, where autograd over per-chunk narrows gave every
// chunk a zero-filled gradient of its whole document, then added those up.
std::vector<torch::Tensor> dflash_chunk_rows(const torch::Tensor& context, const torch::Tensor& blocks,
                                             const DFlashAttentionPlan& plan);

// q [N*B, Hq, D] (block slots, in block order), context_k/v [T, Hkv, D] (the packed rows),
// block_k/v [N*B, Hkv, D]; Hq a multiple of Hkv. Returns [N*B, Hq, D] in q's dtype.
torch::Tensor dflash_attention(const torch::Tensor& q, const torch::Tensor& context_k, const torch::Tensor& context_v,
                               const torch::Tensor& block_k, const torch::Tensor& block_v,
                               const DFlashAttentionPlan& plan, double scale);
// One attention on its own: plans for q, then attends.
torch::Tensor dflash_attention(const torch::Tensor& q, const torch::Tensor& context_k, const torch::Tensor& context_v,
                               const torch::Tensor& block_k, const torch::Tensor& block_v, const DFlashBlocks& blocks,
                               double scale, const DFlashAttentionOptions& options);

}  // namespace topotrain::model
