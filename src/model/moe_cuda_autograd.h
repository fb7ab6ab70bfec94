// The autograd functions over the MoE block's CUDA kernels (router_kernels.cu,
// router_gemm_kernels.cu, expert_combine_kernels.cu), each a kernel forward and a kernel
// backward. route_tokens, router_logits and combine_expert_outputs (moe.h) call them where
// the kernels apply, as moe.cpp checks, and run torch ops otherwise. CUDA builds only.
#pragma once

#ifdef TOPOTRAIN_CUDA

#include <cstdint>

#include <torch/torch.h>

#include "topotrain/model/moe.h"

namespace topotrain::model {

// route_tokens on CUDA logits with E <= kernels::kMaxRouterExperts and k <=
// kernels::kMaxRouterChoices; `selected` comes back uint8, `counts` int32.
Routing route_tokens_by_kernel(const torch::Tensor& logits, int64_t k, bool renormalize);
// router_logits for bf16 x [T, H] and an fp32 weight [E, H] on one CUDA device, where
// kernels::router_gemm_applies(E, H); fp32 arithmetic throughout.
torch::Tensor router_logits_by_kernel(const torch::Tensor& x, const torch::Tensor& weight);
// combine_expert_outputs for bf16 y_rows on CUDA (H % 8 == 0, k <= kernels::kMaxCombineChoices),
// int64 rows and fp32 weights. The backward writes each row of y_rows' gradient once,
// uninitialised first: rows must be a permutation of [0, N).
torch::Tensor combine_expert_outputs_by_kernel(const torch::Tensor& y_rows, const torch::Tensor& rows,
                                               const torch::Tensor& weights);

}  // namespace topotrain::model

#endif  // TOPOTRAIN_CUDA
