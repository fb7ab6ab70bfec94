// Causal self-attention over a packed batch: a token attends only to earlier tokens of
// its own document (cu_seqlens), never across a document boundary.
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace topotrain::model {

enum class AttentionBackend {
  // One masked softmax(QK^T)V per document; any device and dtype. Memory per document is
  // heads x len^2 scores, fine for the CPU runs and as the reference on GPU.
  math_per_document,
  // FlashAttention-2 varlen through at::_flash_attention_forward: one launch for the
  // whole packed batch, exact, bf16/fp16 on CUDA (TOPOTRAIN_HAS_FLASH_VARLEN).
  flash_varlen,
};

std::string to_string(AttentionBackend backend);

// The fastest exact backend this build offers for tensors of `device` and `dtype`.
AttentionBackend choose_attention_backend(const torch::Device& device, torch::ScalarType dtype, int64_t head_dim);

// q [T, Hq, D], k and v [T, Hkv, D] (Hq a multiple of Hkv, grouped as HF's repeat_kv),
// cu_seqlens int32 [docs + 1] on q's device. Returns [T, Hq, D] in q's dtype.
torch::Tensor varlen_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& cu_seqlens, int64_t max_seqlen, double scale,
                                      AttentionBackend backend);

}  // namespace topotrain::model
