#include "topotrain/model/dflash_attention.h"

#include <limits>
#include <stdexcept>
#include <vector>

#include "topotrain/core/error.h"
#include "topotrain/model/attention.h"
#include "topotrain/model/attention_math.h"
#include "topotrain/model/host_values.h"

namespace topotrain::model {
namespace {

constexpr double kMinusInfinity = -std::numeric_limits<double>::infinity();

// One chunk through the plain-math attention: q [queries, Hq, D], keys and values [keys, Hkv, D]
// as dflash_chunk_rows assembles them, `hidden` bool [queries, keys].
torch::Tensor math_chunk(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                         const torch::Tensor& hidden, double scale) {
  auto heads_first = [](const torch::Tensor& t) { return t.transpose(0, 1); };
  return attention_math(heads_first(q), heads_first(keys), heads_first(values), hidden, scale).transpose(0, 1);
}

// A chunk's padded shape: its queries (block slots) and context rows after the fused kernel's
// bucketing (DFlashAttentionOptions::sdpa_context_multiple); exact for the math path.
struct PaddedChunk {
  int64_t queries, context_rows;
};
PaddedChunk padded_chunk(const DFlashAttentionChunk& c, int64_t block_size, const DFlashAttentionOptions& options) {
  const int64_t rows = (c.last_block - c.first_block) * block_size, multiple = options.sdpa_context_multiple;
  if (multiple <= 0 || options.backend != DFlashAttentionBackend::sdpa_chunked) return {rows, c.context_rows};
  return {std::max(rows, options.max_chunk_blocks * block_size),
          (c.context_rows + multiple - 1) / multiple * multiple};
}

// Inputs context [T, H, D] and blocks [N*B, H, D]; per chunk, 6 integers ride along: its first
// context row and count, padded context rows, first block slot and count, padded queries.
class ChunkRowsFunction : public torch::autograd::Function<ChunkRowsFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& context,
                                                const torch::Tensor& blocks, const std::vector<int64_t>& layout) {
    torch::autograd::variable_list chunks;
    for (size_t i = 0; i < layout.size(); i += 6) {
      const int64_t* c = &layout[i];
      std::vector<torch::Tensor> pieces{context.narrow(0, c[0], c[1])};
      if (c[2] > c[1]) pieces.push_back(context.new_zeros({c[2] - c[1], context.size(1), context.size(2)}));
      pieces.push_back(blocks.narrow(0, c[3], c[4]));
      if (c[5] > c[4]) pieces.push_back(blocks.new_zeros({c[5] - c[4], blocks.size(1), blocks.size(2)}));
      chunks.push_back(torch::cat(pieces, 0));
    }
    ctx->saved_data["layout"] = layout;
    ctx->saved_data["context_rows"] = context.size(0);
    return chunks;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto layout = ctx->saved_data["layout"].toIntVector();
    const int64_t context_rows = ctx->saved_data["context_rows"].toInt();
    torch::Tensor grad_context;
    std::vector<torch::Tensor> grad_blocks;
    for (size_t i = 0; i < layout.size(); i += 6) {
      const int64_t* c = &layout[i];
      const auto& grad = grads[i / 6];
      // The chunks partition the block slots in order, so their rows concatenate to the whole
      // gradient; context rows are shared by the chunks of a document and add up.
      grad_blocks.push_back(grad.narrow(0, c[2], c[4]));
      if (!grad_context.defined()) grad_context = grad.new_zeros({context_rows, grad.size(1), grad.size(2)});
      grad_context.narrow(0, c[0], c[1]).add_(grad.narrow(0, 0, c[1]));
    }
    return {grad_context, torch::cat(grad_blocks, 0), torch::Tensor()};
  }
};

// While it lives, scaled_dot_product_attention does not choose cuDNN's kernel. Recent torch
// prefers it on sm90 for attention with a mask, and cuDNN builds an execution plan for every
// new shape: about 9 ms of host time per call on an H200 (DFlash chunks of exact shapes, new
// with every batch, once cost a pipeline's drafter 90% of its step). Where shapes rarely
// repeat, the memory-efficient kernel, which plans nothing, is faster. The backward follows
// the forward's choice.
class WithoutCudnnAttention {
 public:
  WithoutCudnnAttention() : enabled_(at::globalContext().userEnabledCuDNNSDP()) {
    at::globalContext().setSDPUseCuDNN(false);
  }
  ~WithoutCudnnAttention() { at::globalContext().setSDPUseCuDNN(enabled_); }
  WithoutCudnnAttention(const WithoutCudnnAttention&) = delete;
  WithoutCudnnAttention& operator=(const WithoutCudnnAttention&) = delete;

 private:
  bool enabled_;
};

// One chunk's mask, [queries, L + queries] of its padded shape: query slot i (of block i / B)
// sees the first visible[i / B] context rows and its own block's keys. Padded queries form
// blocks that see only their own zero keys, so no row is all -inf; padded context rows are
// hidden like any row past the prefix. Additive in `dtype` for the fused kernel, else bool.
torch::Tensor chunk_mask(const torch::Tensor& visible, const PaddedChunk& shape, int64_t block_size,
                         DFlashAttentionBackend backend, torch::ScalarType dtype) {
  const int64_t queries = shape.queries, L = shape.context_rows;
  auto opts = visible.options();
  auto query_block = torch::arange(queries, opts).div(block_size, "floor");  // [queries]
  auto padded_visible = torch::zeros({queries / block_size}, opts);
  padded_visible.narrow(0, 0, visible.size(0)).copy_(visible);
  auto ctx_allowed = torch::arange(L, opts).unsqueeze(0) < padded_visible.index_select(0, query_block).unsqueeze(1);
  auto blk_allowed = query_block.unsqueeze(1) == query_block.unsqueeze(0);  // [queries, queries]
  auto hidden = torch::cat({ctx_allowed, blk_allowed}, 1).logical_not();
  if (backend == DFlashAttentionBackend::math_chunked) return hidden;
  return torch::zeros({queries, L + queries}, opts.dtype(dtype)).masked_fill(hidden, kMinusInfinity);
}

// keys and values: the chunk's, as dflash_chunk_rows assembles them.
torch::Tensor sdpa_chunk(const torch::Tensor& q, torch::Tensor keys, torch::Tensor values, const torch::Tensor& mask,
                         double scale, const DFlashAttentionOptions& options) {
  const int64_t rows = q.size(0), queries = mask.size(0), groups = q.size(1) / keys.size(1);
  const bool bucketed = options.sdpa_context_multiple > 0;
  // [1, heads, rows, D] views of [rows, heads, D]: the kernels take any strides.
  auto heads_first = [](const torch::Tensor& t) { return t.transpose(0, 1).unsqueeze(0); };
  auto query = heads_first(
      rows < queries ? torch::cat({q, q.new_zeros({queries - rows, q.size(1), q.size(2)})}, 0) : q);
  torch::Tensor out;
#ifdef TOPOTRAIN_CUDA
  // cuDNN's kernel is the fastest here and takes grouped k/v heads, but plans each new
  // shape: only bucketed shapes repeat. The log-sum-exp is the backward's input.
  if (bucketed && q.is_cuda()) {
    out = std::get<0>(at::_scaled_dot_product_cudnn_attention(
        query, heads_first(keys), heads_first(values), mask.view({1, 1, queries, mask.size(1)}),
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
    const WithoutCudnnAttention no_cudnn;
    out = attend();
  }
  return out.squeeze(0).transpose(0, 1).narrow(0, 0, rows);
}

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
  if (device.is_cuda() && half) return DFlashAttentionBackend::sdpa_chunked;
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
  plan.chunks = plan_dflash_chunks(blocks, options.max_chunk_scores, options.max_chunk_blocks);
  const auto visible = host_values_on(blocks.visible_context, plan.device);
  for (const auto& c : plan.chunks) {
    plan.masks.push_back(chunk_mask(visible.narrow(0, c.first_block, c.last_block - c.first_block),
                                    padded_chunk(c, plan.block_size, options), plan.block_size, options.backend,
                                    plan.dtype));
  }
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
  // The chunks partition the block rows in order.
  std::vector<int64_t> chunk_rows;
  for (const auto& c : plan.chunks) chunk_rows.push_back((c.last_block - c.first_block) * B);
  const auto q_parts = q.split_with_sizes(chunk_rows);
  const auto keys = dflash_chunk_rows(context_k, block_k, plan), values = dflash_chunk_rows(context_v, block_v, plan);
  const bool sdpa = plan.options.backend == DFlashAttentionBackend::sdpa_chunked;
  std::vector<torch::Tensor> outputs;
  outputs.reserve(plan.chunks.size());
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    outputs.push_back(sdpa ? sdpa_chunk(q_parts[i], keys[i], values[i], plan.masks[i], scale, plan.options)
                           : math_chunk(q_parts[i], keys[i], values[i], plan.masks[i], scale));
  }
  return torch::cat(outputs, 0);
}

std::vector<torch::Tensor> dflash_chunk_rows(const torch::Tensor& context, const torch::Tensor& blocks,
                                             const DFlashAttentionPlan& plan) {
  std::vector<int64_t> layout;
  for (const auto& c : plan.chunks) {
    const PaddedChunk shape = padded_chunk(c, plan.block_size, plan.options);
    layout.insert(layout.end(), {plan.document_begin[static_cast<size_t>(c.document)], c.context_rows,
                                 shape.context_rows, c.first_block * plan.block_size,
                                 (c.last_block - c.first_block) * plan.block_size, shape.queries});
  }
  return ChunkRowsFunction::apply(context, blocks, layout);
}

torch::Tensor dflash_attention(const torch::Tensor& q, const torch::Tensor& context_k, const torch::Tensor& context_v,
                               const torch::Tensor& block_k, const torch::Tensor& block_v, const DFlashBlocks& blocks,
                               double scale, const DFlashAttentionOptions& options) {
  const DFlashAttentionPlan plan = plan_dflash_attention(blocks, options, q.options());
  return dflash_attention(q, context_k, context_v, block_k, block_v, plan, scale);
}

}  // namespace topotrain::model
