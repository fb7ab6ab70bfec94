// Causal self-attention over a packed batch: a token attends only to earlier tokens of
// its own document (cu_seqlens), never across a document boundary; and over a KV cache.
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
  // whole packed batch, exact, bf16/fp16 on CUDA.
  flash_varlen,
  // A batch whose documents all have one length is a dense [documents, length] grid as it is
  // packed: one batched causal attention over it, cuDNN's kernel on CUDA
  // (1.8x FlashAttention-2 on an H200), a math path elsewhere
  // (tests). A batch of documents of several lengths runs document_windows where they are
  // long, else flash varlen (or math): padding them into a grid cost as much as the faster
  // kernel saved (bench/models/RESULTS.md).
  dense_grid,
  // Long documents of several lengths (runs_in_windows): the same dense causal kernel once per
  // document, over a window of the packed tensors that starts at the document and runs on into
  // the next one (see DocumentWindow). Chosen by layout_documents where dense_grid is preferred.
  document_windows,
};

std::string to_string(AttentionBackend backend);

// The fastest exact backend this build offers for tensors of `device` and `dtype`.
AttentionBackend choose_attention_backend(const torch::Device& device, torch::ScalarType dtype, int64_t head_dim);

// One document of a packed batch and the window of rows the dense causal kernel runs it in.
// The window starts at the document and is `rows` long, the length rounded up to one of 16
// sizes per power of two (so that cuDNN builds a plan for few shapes, not for every length).
// Its rows past the document are the next document's tokens, or zeros past the batch's end:
// under a causal mask the document's queries never see them, their outputs are dropped and
// the backward gives them a zero output gradient, so they add nothing to any gradient.
struct DocumentWindow {
  int64_t begin = 0;   // the document's first token in the packed batch
  int64_t length = 0;  // its tokens
  int64_t rows = 0;    // the window's, >= length
};

// The rounded window of a document of `length` tokens: a multiple of max(64, bit_ceil(length) / 16).
int64_t window_rows(int64_t length);
// One window per document, in order.
std::vector<DocumentWindow> document_windows(const std::vector<int64_t>& lengths);

// Whether documents of these lengths run as document windows where dense_grid is preferred:
// every one at least kMinWindowLength tokens (below it cuDNN on one document loses to
// FlashAttention-2) and kMinWindowMeanLength on average. On an H200 the windows ran 1.19x
// FlashAttention-2's one packed call with documents of 2048-6144 tokens and 0.68x with 1024-3072
// (bench/moe/RESULTS.md); the mean bound, between the two, is not itself measured. It also keeps
// a batch of short documents that happen to pass the first bound from paying cuDNN's plan
// builds for window sizes that rarely come again.
inline constexpr int64_t kMinWindowLength = 2048;
inline constexpr int64_t kMinWindowMeanLength = 3072;
bool runs_in_windows(const std::vector<int64_t>& lengths);

// How one micro-batch's documents meet the attention kernel: planned once per forward and
// shared by every layer.
struct DocumentLayout {
  torch::Tensor cu_seqlens;  // int32 [docs + 1] on the tensors' device
  int64_t max_seqlen = 0;
  AttentionBackend backend = AttentionBackend::math_per_document;
  // dense_grid only: the number of documents, every one max_seqlen tokens long.
  int64_t grid_rows = 0;
  // document_windows only.
  std::vector<DocumentWindow> windows;
};

// `lengths` are the documents' lengths on the host (empty when unknown). Where dense_grid is
// preferred: documents of one length run as a grid, long documents of several lengths
// (runs_in_windows) as document windows, anything else (or lengths unknown) flash varlen where
// the build has it, else math.
DocumentLayout layout_documents(const torch::Tensor& cu_seqlens, int64_t max_seqlen,
                                const std::vector<int64_t>& lengths, AttentionBackend preferred);

// What a layout runs, for logs and benchmarks: "cuDNN on a 8x2048 grid", "cuDNN on 4 document
// windows", "flash varlen (...)".
std::string describe(const DocumentLayout& layout);

// Whether autograd will ask for an attention's backward (not so in a frozen DFlash target):
// a fused kernel then writes the log-sum-exp its backward reads.
bool attention_gradient_follows(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// q [T, Hq, D], k and v [T, Hkv, D] (Hq a multiple of Hkv, grouped as HF's repeat_kv).
// Returns [T, Hq, D] in q's dtype.
torch::Tensor varlen_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const DocumentLayout& layout, double scale);

// KV-cached decoding of one sequence: q [n, Hq, D] of its last n positions, k and v [L, Hkv, D]
// of all L so far; each query sees the keys at or before its own position. The math path
// (attention_math.h) on any device: a step's few queries make a small score matrix.
torch::Tensor cached_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      double scale);

}  // namespace topotrain::model
