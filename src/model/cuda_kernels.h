// Launchers of topotrain's own CUDA kernels (the *.cu files next to this header), for the
// elementwise and per-row work between the matmuls, where chains of generic torch kernels
// made many passes over memory. No torch here: the .cu files compile with nvcc alone; the
// callers (torch side) check dtypes, shapes and contiguity and pass raw pointers.
//
// Every "bf16" pointer is __nv_bfloat16 data; a launcher returns the launch's error.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace topotrain::model::kernels {

// SwiGLU over gate_up [rows, 2 * inner] (gate columns first, then up): out [rows, inner] =
// silu(gate) * up, computed in fp32, rounded once. inner % 8 == 0 (16-byte vectors).
cudaError_t swiglu_forward(const void* gate_up_bf16, void* out_bf16, int64_t rows, int64_t inner,
                           cudaStream_t stream);
// grad_gate_up [rows, 2 * inner] from grad_out [rows, inner].
cudaError_t swiglu_backward(const void* gate_up_bf16, const void* grad_out_bf16, void* grad_gate_up_bf16,
                            int64_t rows, int64_t inner, cudaStream_t stream);

// Per-head RMSNorm then rotate-half RoPE (Qwen3's q_norm/k_norm followed by rotary), one warp
// per (token, head) row of head_dim values. x is [tokens, heads, head_dim] with heads and
// head_dim packed and `x_token_stride` elements between tokens (a column slice of a fused
// QKV projection); weight fp32 [head_dim]; cos/sin bf16 [tokens, head_dim]. Writes y
// contiguous [tokens, heads, head_dim] and rstd fp32 [tokens * heads] for the backward.
// head_dim % 64 == 0 and head_dim <= 256.
cudaError_t norm_rotary_forward(const void* x_bf16, int64_t x_token_stride, const float* weight, const void* cos_bf16,
                                const void* sin_bf16, void* y_bf16, float* rstd, int64_t tokens, int64_t heads,
                                int64_t head_dim, float eps, cudaStream_t stream);
// grad_y contiguous [tokens, heads, head_dim]; grad_x (bf16) laid out as x, heads and
// head_dim packed with `grad_x_token_stride` elements between tokens (a column slice of the
// fused projection's gradient); per-block partial weight gradients weight_grad_partials fp32
// [norm_rotary_backward_blocks(...), head_dim], summed by the caller (a fixed-order sum keeps
// the weight gradient deterministic).
int64_t norm_rotary_backward_blocks(int64_t tokens, int64_t heads);
cudaError_t norm_rotary_backward(const void* x_bf16, int64_t x_token_stride, const float* weight, const void* cos_bf16,
                                 const void* sin_bf16, const float* rstd, const void* grad_y_bf16, void* grad_x_bf16,
                                 int64_t grad_x_token_stride, float* weight_grad_partials, int64_t tokens,
                                 int64_t heads, int64_t head_dim, cudaStream_t stream);

// Cross-entropy of each row of logits bf16 [rows, vocab] (contiguous, vocab % 8 == 0)
// against targets int64 [rows], one block per row in two passes over the row:
//   row_loss[i] = logsumexp(logits[i]) - logits[i][targets[i]]   (fp32; NaN if the target is
//                                                                  outside [0, vocab))
//   argmax[i]   = first index of the row's maximum               (when argmax != nullptr)
//   and, when write_grad, logits[i] is overwritten with
//   (softmax(logits[i]) - onehot(targets[i])) * row_weights[i]   (row_weights may be null: 1)
cudaError_t cross_entropy_rows(void* logits_bf16, const int64_t* targets, const float* row_weights, float* row_loss,
                               int64_t* argmax, bool write_grad, int64_t rows, int64_t vocab, cudaStream_t stream);

// RMSNorm over rows of x bf16 [rows, hidden] (contiguous, hidden % 8 == 0, hidden <= 8192),
// optionally of the sum x + residual: sum = bf16(x + residual) is written to `sum_out` (the
// residual stream's next value) and normalised as it was stored. y = bf16(s * rstd * weight),
// rstd fp32 [rows]. residual and sum_out are both null or both set.
cudaError_t rms_norm_forward(const void* x_bf16, const void* residual_bf16, const float* weight, void* sum_out_bf16,
                             void* y_bf16, float* rstd, int64_t rows, int64_t hidden, float eps, cudaStream_t stream);
// From grad_y (and grad_sum, the gradient the sum gets from its other uses; may be null):
// grad_x = rstd * (grad_y * w - xhat * mean(grad_y * w * xhat)) + grad_sum, with xhat = s * rstd
// for s the normalised input (the stored sum), and per-block partial weight gradients
// weight_grad_partials fp32 [rms_norm_backward_blocks(rows), hidden], summed by the caller.
int64_t rms_norm_backward_blocks(int64_t rows);
cudaError_t rms_norm_backward(const void* s_bf16, const float* weight, const float* rstd, const void* grad_y_bf16,
                              const void* grad_sum_bf16, void* grad_x_bf16, float* weight_grad_partials, int64_t rows,
                              int64_t hidden, cudaStream_t stream);

// out[t] = sum_j w[t, j] * src[rows[t, j]], w = weights fp32 [tokens, k] or 1 where weights is
// null: src bf16 [N, hidden] (contiguous, hidden % 8 == 0), rows int64 [tokens, k] in [0, N),
// out bf16 [tokens, hidden]; one warp per token, fp32 sums, k <= kMaxCombineChoices. The MoE
// combine (weights set, src the experts' outputs in expert order) and the dispatch's backward
// (no weights, src the gradients of the dispatched rows).
constexpr int kMaxCombineChoices = 8;
cudaError_t gather_rows_sum(const void* src_bf16, const int64_t* rows, const float* weights, void* out_bf16,
                            int64_t tokens, int64_t k, int64_t hidden, cudaStream_t stream);
// The combine's backward where rows is a permutation of [0, N) (N = tokens * k), so that every
// row of grad_y_rows is written exactly once, without atomics:
// grad_y_rows[rows[t, j]] = weights[t, j] * grad_out[t] (bf16) and
// grad_weights[t, j] = <grad_out[t], y_rows[rows[t, j]]> (fp32).
cudaError_t expert_combine_backward(const void* y_rows_bf16, const int64_t* rows, const float* weights,
                                    const void* grad_out_bf16, void* grad_y_rows_bf16, float* grad_weights,
                                    int64_t tokens, int64_t k, int64_t hidden, cudaStream_t stream);

// The MoE router after its GEMM, one warp per token: logits fp32 [tokens, experts] (contiguous)
// -> probs = softmax(logits) fp32 [tokens, experts]; the k largest probabilities in descending
// order (NaN first, ties to the lower expert) as selected uint8 [tokens, k] and weights fp32
// [tokens, k], divided by their sum when `renormalize`; counts int32 [experts] = how many of the
// tokens * k choices went to each expert (zeroed here first). experts <= kMaxRouterExperts,
// 1 <= k <= min(experts, kMaxRouterChoices).
constexpr int kMaxRouterExperts = 256;
constexpr int kMaxRouterChoices = 32;
cudaError_t route_forward(const float* logits, float* probs, float* weights, uint8_t* selected, int* counts,
                          int64_t tokens, int64_t experts, int64_t k, bool renormalize, cudaStream_t stream);
// grad_logits fp32 [tokens, experts] from the gradients of probs and weights (either may be null:
// zero), through the renormalisation, the top-k and the softmax.
cudaError_t route_backward(const float* probs, const uint8_t* selected, const float* weights,
                           const float* grad_weights, const float* grad_probs, float* grad_logits, int64_t tokens,
                           int64_t experts, int64_t k, bool renormalize, cudaStream_t stream);

// The router's GEMM in fp32 over bf16 activations: logits fp32 [tokens, experts] =
// x bf16 [tokens, hidden] . weight fp32 [experts, hidden]^T, each x value converted exactly and
// the products summed in fp32 (what x.to(float) @ weight.t() computes, summed in another order),
// without an fp32 copy of x. The three launchers take the shapes router_gemm_applies accepts.
constexpr int kMaxRouterGemmExperts = 64;
constexpr int kMaxRouterGemmHidden = 3072;
bool router_gemm_applies(int64_t experts, int64_t hidden);
cudaError_t router_logits_forward(const void* x_bf16, const float* weight, float* logits, int64_t tokens,
                                  int64_t experts, int64_t hidden, cudaStream_t stream);
// grad_x bf16 [tokens, hidden] = grad_logits fp32 [tokens, experts] . weight, summed in fp32,
// rounded once.
cudaError_t router_logits_backward_input(const float* grad_logits, const float* weight, void* grad_x_bf16,
                                         int64_t tokens, int64_t experts, int64_t hidden, cudaStream_t stream);
// Per-block partial weight gradients partials fp32 [router_weight_grad_blocks(tokens), experts,
// hidden], each block's sum over its tokens of grad_logits[t]^T x[t] (zero for a block with
// none), summed by the caller (a fixed-order sum keeps the weight gradient deterministic).
int64_t router_weight_grad_blocks(int64_t tokens);
cudaError_t router_logits_backward_weight(const void* x_bf16, const float* grad_logits, float* partials,
                                          int64_t tokens, int64_t experts, int64_t hidden, cudaStream_t stream);

// sum fp32 [n] += grad bf16 [n], each value converted exactly and added in fp32 (what
// sum.add_(grad.to(float)) computes, in one pass). n % 8 == 0, both pointers 16-byte aligned.
cudaError_t accumulate_bf16(float* sum, const void* grad_bf16, int64_t n, cudaStream_t stream);
// A stacked weight's rows in another order, rows int64 [n] a permutation of [0, n), columns % 8
// == 0, every pointer 16-byte aligned (model/compute_weight.h's row order):
// dst bf16 [n, columns] row i = src fp32 [n, columns] row rows[i], rounded to nearest even (what
// src.index_select(0, rows).to(bf16) computes, in one pass; cast_rows_kernels.cu);
cudaError_t cast_rows_bf16(const float* src, const int64_t* rows, void* dst_bf16, int64_t n, int64_t columns,
                           cudaStream_t stream);
// sum fp32 [n, columns] row rows[i] += grad bf16 [n, columns] row i, as accumulate_bf16 adds.
cudaError_t accumulate_bf16_permuted(float* sum, const void* grad_bf16, const int64_t* rows, int64_t n,
                                     int64_t columns, cudaStream_t stream);
// sum fp32 [rows, columns] row sorted_rows[i] += grad bf16 [n, columns] row order[i], for i in
// [0, n): sorted_rows ascending (a stable sort of the row indices, order its permutation).
// Each row's run is summed in position order, then added: deterministic. columns % 8 == 0,
// both pointers 16-byte aligned, every index in range.
cudaError_t accumulate_bf16_rows(float* sum, const void* grad_bf16, const int64_t* sorted_rows, const int64_t* order,
                                 int64_t n, int64_t columns, cudaStream_t stream);

}  // namespace topotrain::model::kernels
