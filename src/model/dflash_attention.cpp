#include "topotrain/model/dflash_attention.h"

#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "topotrain/core/error.h"
#include "topotrain/model/attention.h"
#include "topotrain/model/host_values.h"
#include "topotrain/torch_compat.h"

namespace topotrain::model {
namespace {

constexpr double kMinusInfinity = -std::numeric_limits<double>::infinity();

// GQA without repeating k/v: query head h = kv * groups + g (HF's repeat_kv order), so the
// queries are viewed as [Hkv, groups, ...] and each kv head serves its group by broadcasting.
torch::Tensor math_chunk(const torch::Tensor& q, const torch::Tensor& ctx_k, const torch::Tensor& ctx_v,
                         const torch::Tensor& blk_k, const torch::Tensor& blk_v, const torch::Tensor& visible,
                         int64_t block_size, double scale) {
  const int64_t n = visible.size(0), B = block_size, L = ctx_k.size(0);
  const int64_t hkv = blk_k.size(1), groups = q.size(1) / hkv, dim = q.size(2);
  auto qh = q.view({n, B, hkv, groups, dim}).permute({2, 3, 0, 1, 4});       // [Hkv, G, n, B, D]
  auto kb = blk_k.view({n, B, hkv, dim}).permute({2, 0, 3, 1}).unsqueeze(1);  // [Hkv, 1, n, D, B]
  auto vb = blk_v.view({n, B, hkv, dim}).permute({2, 0, 1, 3}).unsqueeze(1);  // [Hkv, 1, n, B, D]
  auto scores = torch::matmul(qh, kb);                                         // [Hkv, G, n, B, B]
  if (L > 0) {
    auto ctx_scores = torch::matmul(qh.reshape({hkv, groups * n * B, dim}), ctx_k.permute({1, 2, 0}))
                          .view({hkv, groups, n, B, L});
    auto hidden = torch::arange(L, visible.options()).unsqueeze(0) >= visible.unsqueeze(1);  // [n, L]
    ctx_scores = ctx_scores.masked_fill(hidden.view({1, 1, n, 1, L}), kMinusInfinity);
    scores = torch::cat({ctx_scores, scores}, -1);
  }
  // Softmax in at least fp32 as HF's eager path; every row sees its own block, so none is
  // all -inf.
  const auto softmax_dtype = q.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  auto probs = torch::softmax(scores * scale, -1, softmax_dtype).to(q.scalar_type());
  auto out = torch::matmul(probs.narrow(-1, L, B), vb);  // [Hkv, G, n, B, D]
  if (L > 0) {
    out = out + torch::matmul(probs.narrow(-1, 0, L).reshape({hkv, groups * n * B, L}), ctx_v.permute({1, 0, 2}))
                    .view({hkv, groups, n, B, dim});
  }
  return out.permute({2, 3, 0, 1, 4}).reshape({n * B, hkv * groups, dim});
}

#if TOPOTRAIN_HAS_SDPA
// One chunk's additive mask, [queries, L + queries]: query slot i (of block i / B) sees the
// first visible[i / B] context rows and its own block's keys. With options.sdpa_context_multiple
// > 0 the chunk is padded to a bucketed shape: queries to max_sdpa_chunk_blocks blocks (padded
// blocks see only their own zero keys, so no row is all -inf), context rows up to the
// multiple (hidden like any row past the prefix).
torch::Tensor sdpa_chunk_mask(const torch::Tensor& visible, int64_t context_rows, int64_t block_size,
                              const DFlashAttentionOptions& options, torch::ScalarType dtype) {
  const int64_t rows = visible.size(0) * block_size, multiple = options.sdpa_context_multiple;
  const bool bucketed = multiple > 0;
  const int64_t queries = bucketed ? std::max(rows, options.max_sdpa_chunk_blocks * block_size) : rows;
  const int64_t L = bucketed ? (context_rows + multiple - 1) / multiple * multiple : context_rows;
  auto opts = visible.options();
  auto query_block = torch::arange(queries, opts).div(block_size, "floor");  // [queries]
  auto padded_visible = torch::zeros({queries / block_size}, opts);
  padded_visible.narrow(0, 0, visible.size(0)).copy_(visible);
  auto ctx_allowed = torch::arange(L, opts).unsqueeze(0) < padded_visible.index_select(0, query_block).unsqueeze(1);
  auto blk_allowed = query_block.unsqueeze(1) == query_block.unsqueeze(0);  // [queries, queries]
  return torch::zeros({queries, L + queries}, opts.dtype(dtype))
      .masked_fill(torch::cat({ctx_allowed, blk_allowed}, 1).logical_not(), kMinusInfinity);
}

// Each tensor's rows followed by zero rows up to its count, one after the other: a chunk's
// keys or values (or its padded queries) in one copy.
torch::Tensor padded_rows(std::initializer_list<std::pair<torch::Tensor, int64_t>> parts) {
  std::vector<torch::Tensor> pieces;
  for (const auto& [t, rows] : parts) {
    pieces.push_back(t);
    if (rows > t.size(0)) pieces.push_back(t.new_zeros({rows - t.size(0), t.size(1), t.size(2)}));
  }
  return pieces.size() == 1 ? pieces[0] : torch::cat(pieces, 0);
}

torch::Tensor sdpa_chunk(const torch::Tensor& q, const torch::Tensor& ctx_k, const torch::Tensor& ctx_v,
                         const torch::Tensor& blk_k, const torch::Tensor& blk_v, const torch::Tensor& mask,
                         double scale, const DFlashAttentionOptions& options) {
  const int64_t rows = q.size(0), queries = mask.size(0), L = mask.size(1) - queries;
  const int64_t groups = q.size(1) / blk_k.size(1);
  const bool bucketed = options.sdpa_context_multiple > 0;
  // [1, heads, rows, D] views of [rows, heads, D]: the kernels take any strides.
  auto heads_first = [](const torch::Tensor& t) { return t.transpose(0, 1).unsqueeze(0); };
  auto query = heads_first(padded_rows({{q, queries}}));
  auto keys = padded_rows({{ctx_k, L}, {blk_k, queries}}), values = padded_rows({{ctx_v, L}, {blk_v, queries}});
  torch::Tensor out;
#if TOPOTRAIN_HAS_CUDNN_ATTENTION
  // cuDNN's kernel is the fastest here and takes grouped k/v heads, but plans each new
  // shape: only bucketed shapes repeat. The log-sum-exp is the backward's input.
  if (bucketed) {
    out = std::get<0>(at::_scaled_dot_product_cudnn_attention(
        query, heads_first(keys), heads_first(values), mask.view({1, 1, queries, L + queries}),
        attention_gradient_follows(q, keys, values),
        /*dropout_p=*/0.0, /*is_causal=*/false, /*return_debug_mask=*/false, scale));
    return out.squeeze(0).transpose(0, 1).narrow(0, 0, rows);
  }
#endif
  // The memory-efficient kernel takes no grouped k/v with a mask: repeat the chunk's keys.
  keys = heads_first(keys.repeat_interleave(groups, 1));
  values = heads_first(values.repeat_interleave(groups, 1));
  auto attend = [&] {
    return at::scaled_dot_product_attention(query, keys, values, mask, 0.0, /*is_causal=*/false, scale);
  };
  if (bucketed) {
    out = attend();
  } else {
    const compat::WithoutCudnnAttention no_cudnn;
    out = attend();
  }
  return out.squeeze(0).transpose(0, 1).narrow(0, 0, rows);
}
#endif

}  // namespace

std::string to_string(DFlashAttentionBackend backend) {
  switch (backend) {
    case DFlashAttentionBackend::math_chunked:
      return "math (chunked per document)";
    case DFlashAttentionBackend::sdpa_chunked:
      return "sdpa with an additive mask (chunked per document)";
  }
  return "unknown";
}

DFlashAttentionBackend choose_dflash_attention_backend(const torch::Device& device, torch::ScalarType dtype) {
  const bool half = dtype == torch::kBFloat16 || dtype == torch::kFloat16;
  if (compat::kHasSdpa && device.is_cuda() && half) return DFlashAttentionBackend::sdpa_chunked;
  return DFlashAttentionBackend::math_chunked;
}

std::vector<DFlashAttentionChunk> plan_dflash_chunks(const DFlashBlocks& blocks, int64_t max_scores,
                                                     int64_t max_blocks) {
  if (max_scores <= 0 || max_blocks <= 0) {
    throw std::invalid_argument(cat("plan_dflash_chunks: budgets must be positive, got ", max_scores, " scores and ",
                                    max_blocks, " blocks"));
  }
  const int64_t B = blocks.block_size;
  std::vector<DFlashAttentionChunk> chunks;
  for (int64_t d = 0; d < blocks.num_documents(); ++d) {
    const int64_t end = blocks.document_blocks[d + 1];
    for (int64_t first = blocks.document_blocks[d]; first < end;) {
      // Anchors ascend, so the last block of a chunk sees the longest context prefix.
      int64_t last = first + 1;
      while (last < end && last - first < max_blocks &&
             (last + 1 - first) * B * (blocks.visible_context[last] + B) <= max_scores) {
        ++last;
      }
      chunks.push_back({first, last, d, blocks.visible_context[last - 1]});
      first = last;
    }
  }
  return chunks;
}

DFlashAttentionPlan plan_dflash_attention(const DFlashBlocks& blocks, const DFlashAttentionOptions& options,
                                          const torch::TensorOptions& like) {
  DFlashAttentionPlan plan;
  plan.options = options;
  plan.block_size = blocks.block_size;
  plan.num_blocks = blocks.num_blocks();
  plan.document_begin = blocks.document_begin;
  plan.device = like.device();
  plan.dtype = c10::typeMetaToScalarType(like.dtype());
  const bool sdpa = options.backend == DFlashAttentionBackend::sdpa_chunked;
#if !TOPOTRAIN_HAS_SDPA
  if (sdpa) throw std::runtime_error("dflash_attention: this build has no scaled_dot_product_attention (torch >= 2.1)");
#endif
  plan.chunks = plan_dflash_chunks(blocks, options.max_chunk_scores,
                                   sdpa ? options.max_sdpa_chunk_blocks : blocks.num_blocks() + 1);
  plan.visible = host_values_on(blocks.visible_context, plan.device);
#if TOPOTRAIN_HAS_SDPA
  if (sdpa) {
    for (const auto& c : plan.chunks) {
      plan.masks.push_back(sdpa_chunk_mask(plan.visible.narrow(0, c.first_block, c.last_block - c.first_block),
                                           c.context_rows, plan.block_size, options, plan.dtype));
    }
  }
#endif
  return plan;
}

torch::Tensor dflash_attention(const torch::Tensor& q, const torch::Tensor& context_k, const torch::Tensor& context_v,
                               const torch::Tensor& block_k, const torch::Tensor& block_v,
                               const DFlashAttentionPlan& plan, double scale) {
  const int64_t B = plan.block_size, slots = plan.num_blocks * B;
  if (q.dim() != 3 || q.size(0) != slots || block_k.sizes() != block_v.sizes() || block_k.size(0) != slots ||
      context_k.sizes() != context_v.sizes() || context_k.dim() != 3 || block_k.size(1) != context_k.size(1) ||
      q.size(1) % block_k.size(1) != 0) {
    throw std::invalid_argument(cat("dflash_attention: expected q [", slots, ", Hq, D], block k/v [", slots,
                                    ", Hkv, D], context k/v [T, Hkv, D] with Hq a multiple of Hkv; got q ", q.sizes(),
                                    ", block k ", block_k.sizes(), ", block v ", block_v.sizes(), ", context k ",
                                    context_k.sizes(), ", context v ", context_v.sizes()));
  }
  if (q.device() != plan.device || q.scalar_type() != plan.dtype) {
    throw std::invalid_argument(cat("dflash_attention: the plan was made for ", plan.dtype, " on ", plan.device,
                                    ", the queries are ", q.scalar_type(), " on ", q.device()));
  }
  if (plan.chunks.empty()) return torch::empty_like(q);
  // Split once, not narrowed per chunk: a narrow's backward writes a zero-filled gradient of
  // the whole input, and those add up over the chunks (O(chunks x tensor) memory traffic).
  // The chunks partition the block rows in order; each chunk's context is a prefix of its
  // document's rows, so only documents are split off the context.
  std::vector<int64_t> chunk_rows, document_rows;
  for (const auto& c : plan.chunks) chunk_rows.push_back((c.last_block - c.first_block) * B);
  const auto documents = plan.document_begin.size();
  for (size_t d = 0; d < documents; ++d) {
    const int64_t end = d + 1 < documents ? plan.document_begin[d + 1] : context_k.size(0);
    document_rows.push_back(end - plan.document_begin[d]);
  }
  const auto q_parts = q.split_with_sizes(chunk_rows), k_parts = block_k.split_with_sizes(chunk_rows),
             v_parts = block_v.split_with_sizes(chunk_rows);
  const auto ctx_k_docs = context_k.split_with_sizes(document_rows),
             ctx_v_docs = context_v.split_with_sizes(document_rows);
  std::vector<torch::Tensor> outputs;
  outputs.reserve(plan.chunks.size());
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const auto& c = plan.chunks[i];
    auto ctx_k = ctx_k_docs[static_cast<size_t>(c.document)].narrow(0, 0, c.context_rows);
    auto ctx_v = ctx_v_docs[static_cast<size_t>(c.document)].narrow(0, 0, c.context_rows);
    if (!plan.masks.empty()) {
#if TOPOTRAIN_HAS_SDPA
      outputs.push_back(
          sdpa_chunk(q_parts[i], ctx_k, ctx_v, k_parts[i], v_parts[i], plan.masks[i], scale, plan.options));
#endif
      continue;
    }
    auto visible = plan.visible.narrow(0, c.first_block, c.last_block - c.first_block);
    outputs.push_back(math_chunk(q_parts[i], ctx_k, ctx_v, k_parts[i], v_parts[i], visible, B, scale));
  }
  return torch::cat(outputs, 0);
}

torch::Tensor dflash_attention(const torch::Tensor& q, const torch::Tensor& context_k, const torch::Tensor& context_v,
                               const torch::Tensor& block_k, const torch::Tensor& block_v, const DFlashBlocks& blocks,
                               double scale, const DFlashAttentionOptions& options) {
  const DFlashAttentionPlan plan = plan_dflash_attention(blocks, options, q.options());
  return dflash_attention(q, context_k, context_v, block_k, block_v, plan, scale);
}

}  // namespace topotrain::model
