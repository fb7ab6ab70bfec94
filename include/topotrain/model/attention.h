// Causal self-attention over a packed batch: a token attends only to earlier tokens of
// its own document (cu_seqlens), never across a document boundary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace topotrain::model {

enum class AttentionBackend {
  // One masked softmax(QK^T)V per document; any device and dtype. Memory per document is
  // heads x len^2 scores, fine for the CPU runs and as the reference on GPU.
  math_per_document,
  // FlashAttention-2 varlen through at::_flash_attention_forward: one launch for the
  // whole packed batch, exact, bf16/fp16 on CUDA (TOPOTRAIN_HAS_FLASH_VARLEN).
  flash_varlen,
  // A batch whose documents all have one length is a dense [documents, length] grid as it is
  // packed: one batched causal attention over it, cuDNN's kernel on CUDA
  // (TOPOTRAIN_HAS_CUDNN_ATTENTION; 1.8x FlashAttention-2 on an H200), a math path elsewhere
  // (tests). A batch of documents of several lengths runs flash varlen (or math) instead:
  // padding them into a grid cost as much as the faster kernel saved (bench/models/RESULTS.md).
  dense_grid,
};

std::string to_string(AttentionBackend backend);

// The fastest exact backend this build offers for tensors of `device` and `dtype`.
AttentionBackend choose_attention_backend(const torch::Device& device, torch::ScalarType dtype, int64_t head_dim);

// How one micro-batch's documents meet the attention kernel: planned once per forward and
// shared by every layer.
struct DocumentLayout {
  torch::Tensor cu_seqlens;  // int32 [docs + 1] on the tensors' device
  int64_t max_seqlen = 0;
  AttentionBackend backend = AttentionBackend::math_per_document;
  // dense_grid only: the number of documents, every one max_seqlen tokens long.
  int64_t grid_rows = 0;
};

// `lengths` are the documents' lengths on the host (empty when unknown). dense_grid gives
// way to flash varlen (where the build has it, else math) unless they are known and equal.
DocumentLayout layout_documents(const torch::Tensor& cu_seqlens, int64_t max_seqlen,
                                const std::vector<int64_t>& lengths, AttentionBackend preferred);

// What a layout runs, for logs and benchmarks: "cuDNN on a 8x2048 grid", "flash varlen (...)".
std::string describe(const DocumentLayout& layout);

// q [T, Hq, D], k and v [T, Hkv, D] (Hq a multiple of Hkv, grouped as HF's repeat_kv).
// Returns [T, Hq, D] in q's dtype.
torch::Tensor varlen_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const DocumentLayout& layout, double scale);

}  // namespace topotrain::model
