#include "topotrain/model/lm_loss.h"

#include <stdexcept>

#include "kernel_launch.h"
#include "topotrain/core/error.h"
#include "topotrain/model/accumulate_into_grad.h"
#include "topotrain/torch_compat.h"

#ifdef TOPOTRAIN_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace topotrain::model {
namespace {

// Rows of a packed batch that have a next-token target the loss trains on (every token
// but the last of its sequence, whose next token has loss mask 1) and those targets. Their
// count is the batch's host field num_loss_targets (a token j has loss mask 1 and is not
// its sequence's first exactly when row j - 1 has a target), so the rows are found without
// waiting for the device.
struct NextTokenTargets {
  torch::Tensor rows;     // int64 [N]
  torch::Tensor targets;  // int64 [N]
};

// The indices of the true entries of a 1-D bool tensor, int64 [count], where the caller knows
// `count` on the host. On CUDA nonzero_static fills a result of that size without the host
// waiting to learn it (at::nonzero would); on CPU the count is checked, so that CPU runs
// catch a caller whose count is wrong (on CUDA it would pad with -1 or drop indices).
at::Tensor nonzero_of_count(const at::Tensor& mask, std::int64_t count) {
  if (mask.is_cuda()) return at::nonzero_static(mask, count, /*fill_value=*/-1).squeeze(1);
  at::Tensor rows = mask.nonzero().squeeze(1);
  if (rows.size(0) != count) {
    throw std::logic_error(cat("nonzero_of_count: the mask has ", rows.size(0), " true entries, the caller counted ",
                               count));
  }
  return rows;
}

NextTokenTargets next_token_targets(const PackedBatch& batch) {
  const auto opts = batch.tokens.options();
  auto has_target = torch::ones({batch.num_tokens()}, opts.dtype(torch::kBool));
  auto last_of_sequence = batch.cu_seqlens.slice(0, 1).to(torch::kInt64) - 1;
  has_target.index_fill_(0, last_of_sequence, false);
  const int64_t n = batch.num_tokens();
  if (batch.loss_mask.defined() && n > 1) {
    has_target.narrow(0, 0, n - 1).logical_and_(batch.loss_mask.narrow(0, 1, n - 1));
  }
  auto rows = nonzero_of_count(has_target, batch.num_loss_targets);
  return {rows, batch.tokens.index_select(0, rows + 1)};
}

// sum = (first ? 0 : sum) + d^T h for one chunk: d [n, V] and h [n, H] in the compute dtype,
// sum [V, H] fp32. For bf16 on CUDA the GEMM writes into the fp32 sum itself (beta = 1), where
// a bf16 product and a mixed-dtype add made two more passes over [V, H] per chunk.
void add_weight_gradient(torch::Tensor& sum, const torch::Tensor& d, const torch::Tensor& h, bool first) {
#ifdef TOPOTRAIN_CUDA
  if (d.is_cuda() && d.scalar_type() == torch::kBFloat16 && h.scalar_type() == torch::kBFloat16 &&
      d.is_contiguous() && h.is_contiguous() && sum.is_contiguous()) {
    // cuBLAS is column-major: the row-major sum [V, H] is its C^T [H, V] = h^T d, with h
    // read as [H, n] (lda H) and d as the transpose of [V, n] (ldb V). No copies. torch's
    // handle comes bound to the current stream.
    const int rows = static_cast<int>(d.size(0)), vocab = static_cast<int>(d.size(1)),
              hidden = static_cast<int>(h.size(1));
    const float alpha = 1.0f, beta = first ? 0.0f : 1.0f;
    const auto status =
        cublasGemmEx(at::cuda::getCurrentCUDABlasHandle(), CUBLAS_OP_N, CUBLAS_OP_T, hidden, vocab, rows, &alpha,
                     h.data_ptr(), CUDA_R_16BF, hidden, d.data_ptr(), CUDA_R_16BF, vocab, &beta, sum.data_ptr(),
                     CUDA_R_32F, hidden, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (status != CUBLAS_STATUS_SUCCESS) {
      throw std::runtime_error(cat("linear_cross_entropy: the weight-gradient GEMM (bf16 into fp32, ", vocab, " x ",
                                   hidden, " over ", rows, " rows) failed: ", cublasGetStatusString(status)));
    }
    return;
  }
#endif
  auto product = torch::matmul(d.t(), h);
  if (first) {
    sum.copy_(product);
  } else {
    sum.add_(product);  // a bf16 product is read straight into the fp32 sum
  }
}

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// One chunk's per-row losses (unweighted, fp32 [n]) and, when want_grad, d(sum_i w_i
// loss_i)/d(logits) in the logits' dtype. argmax_rows, when defined, receives each row's
// most likely token (the argmax of the compute-dtype logits is that of their fp32 copy);
// it is a contiguous slice of the caller's result.
struct ChunkRows {
  torch::Tensor row_loss, dlogits;
};

ChunkRows hard_target_rows(torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& w,
                           const torch::Tensor& argmax_rows, bool want_grad) {
#ifdef TOPOTRAIN_CUDA
  if (own_kernels_apply(logits) && logits.is_contiguous() && logits.size(1) % 8 == 0) {
    // The kernel overwrites the logits with their gradient: one bf16 buffer per chunk.
    auto row_loss = torch::empty({logits.size(0)}, logits.options().dtype(torch::kFloat32));
    auto targets_in = targets.contiguous();
    auto weights_in = w.defined() ? w.contiguous() : torch::Tensor();
    check_launch(kernels::cross_entropy_rows(logits.data_ptr(), targets_in.data_ptr<int64_t>(),
                                             weights_in.defined() ? weights_in.data_ptr<float>() : nullptr,
                                             row_loss.data_ptr<float>(),
                                             argmax_rows.defined() ? argmax_rows.data_ptr<int64_t>() : nullptr,
                                             want_grad,
                                             logits.size(0), logits.size(1), stream_of(logits)),
                 "cross_entropy_rows");
    return {row_loss, want_grad ? logits : torch::Tensor()};
  }
#endif
  if (argmax_rows.defined()) argmax_rows.copy_(logits.argmax(-1));
  // log_softmax reads the compute-dtype logits once and writes fp32 (one fused kernel on
  // CUDA for bf16 input), where a cast, a logsumexp and a subtraction made four passes.
  auto log_probs = torch::log_softmax(logits, -1, torch::kFloat32);
  auto row_loss = -log_probs.gather(1, targets.unsqueeze(1)).squeeze(1);
  if (!want_grad) return {row_loss, torch::Tensor()};
  // d(loss_i)/d(logits_i) = softmax(logits_i) - onehot(target_i)
  auto dlogits = log_probs.exp_();
  dlogits.scatter_add_(1, targets.unsqueeze(1), torch::full({logits.size(0), 1}, -1.0f, dlogits.options()));
  if (w.defined()) dlogits *= w.unsqueeze(1);
  return {row_loss, dlogits.to(logits.scalar_type())};
}

// loss_i = KL(teacher_i || model_i); its gradient is softmax(model) - softmax(teacher).
ChunkRows soft_target_rows(const torch::Tensor& logits, const torch::Tensor& teacher_hidden,
                           const torch::Tensor& weight, const torch::Tensor& w, const torch::Tensor& argmax_rows,
                           bool want_grad) {
  if (argmax_rows.defined()) argmax_rows.copy_(logits.argmax(-1));
  auto log_probs = torch::log_softmax(logits, -1, torch::kFloat32);
  auto teacher_log_probs = torch::log_softmax(torch::matmul(teacher_hidden, weight.t()), -1, torch::kFloat32);
  auto teacher_probs = teacher_log_probs.exp();
  auto row_loss = (teacher_probs * (teacher_log_probs - log_probs)).sum(-1);
  if (!want_grad) return {row_loss, torch::Tensor()};
  auto dlogits = log_probs.exp_();
  dlogits -= teacher_probs;
  if (w.defined()) dlogits *= w.unsqueeze(1);
  return {row_loss, dlogits.to(logits.scalar_type())};
}

// Invariant: the loss is a scalar, so d(loss)/d(input) is known after the forward; the
// backward only multiplies the saved gradients by the incoming scalar.
class LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
 public:
  // Optional inputs travel as c10::optional: autograd records every tensor argument.
  static tensor_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                             const c10::optional<torch::Tensor>& targets_or_none,
                             const c10::optional<torch::Tensor>& row_weights_or_none,
                             const c10::optional<torch::Tensor>& teacher_or_none,
                             const c10::optional<torch::Tensor>& weight_compute_or_none, int64_t chunk_rows,
                             bool want_argmax) {
    const torch::Tensor targets = targets_or_none.value_or(torch::Tensor());
    const torch::Tensor row_weights = row_weights_or_none.value_or(torch::Tensor());
    const torch::Tensor teacher_hidden = teacher_or_none.value_or(torch::Tensor());
    const bool grad_of_hidden = hidden.requires_grad(), grad_of_weight = weight.requires_grad();
    // The weight may come in fp32 (a master weight): its compute-dtype copy is made here (or
    // handed in already made), out of autograd's sight, and its gradient goes back in fp32
    // without casts on the way.
    const auto weight_compute = weight_compute_or_none ? *weight_compute_or_none : weight.to(hidden.scalar_type());
    const bool soft = teacher_hidden.defined();
    const int64_t rows = hidden.size(0);
    auto loss = torch::zeros({}, hidden.options().dtype(torch::kFloat32));
    auto argmax = torch::empty({want_argmax ? rows : 0}, hidden.options().dtype(torch::kInt64));
    torch::Tensor grad_hidden, grad_weight;
    if (grad_of_hidden) grad_hidden = torch::empty_like(hidden);
    if (grad_of_weight) {
      // Every entry is written by the first chunk's GEMM; with no rows the gradient is zero.
      const auto fp32 = weight.options().dtype(torch::kFloat32);
      grad_weight = rows > 0 ? torch::empty(weight.sizes(), fp32) : torch::zeros(weight.sizes(), fp32);
    }
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - begin);
      auto h = hidden.narrow(0, begin, n);
      auto logits = torch::matmul(h, weight_compute.t());
      torch::Tensor w;
      if (row_weights.defined()) w = row_weights.narrow(0, begin, n).to(torch::kFloat32);
      const bool want_grad = grad_of_hidden || grad_of_weight;
      auto argmax_rows = want_argmax ? argmax.narrow(0, begin, n) : torch::Tensor();
      auto [row_loss, d] = soft ? soft_target_rows(logits, teacher_hidden.narrow(0, begin, n), weight_compute, w,
                                                   argmax_rows, want_grad)
                                : hard_target_rows(logits, targets.narrow(0, begin, n), w, argmax_rows, want_grad);
      loss += w.defined() ? (row_loss * w).sum() : row_loss.sum();
      if (!want_grad) continue;
      if (grad_of_hidden) grad_hidden.narrow(0, begin, n).copy_(torch::matmul(d, weight_compute));
      if (grad_of_weight) add_weight_gradient(grad_weight, d, h, begin == 0);
    }
    ctx->save_for_backward({grad_hidden, grad_of_weight ? grad_weight.to(weight.scalar_type()) : grad_weight});
    ctx->mark_non_differentiable({argmax});
    if (grad_of_weight && AccumulateIntoGrad::active()) ctx->saved_data["add_into_grad_of"] = weight;
    return {loss, argmax};
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& scale = grad_outputs[0];
    auto scaled = [&](const torch::Tensor& g) { return g.defined() ? g * scale.to(g.scalar_type()) : torch::Tensor(); };
    torch::Tensor grad_weight;
    const auto into = ctx->saved_data.find("add_into_grad_of");
    if (into == ctx->saved_data.end() ||
        !add_into_grad(into->second.toTensor(), saved[1], scale.to(saved[1].scalar_type())))
      grad_weight = scaled(saved[1]);
    return {scaled(saved[0]), grad_weight, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

LinearCrossEntropy linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                        const torch::Tensor& targets, const LinearCrossEntropyOptions& options) {
  if (options.chunk_rows <= 0) {
    throw std::invalid_argument(cat("linear_cross_entropy: chunk_rows must be positive, got ", options.chunk_rows));
  }
  const bool soft = options.teacher_hidden.defined();
  const bool shapes_ok = hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1) &&
                         (soft || (targets.defined() && targets.dim() == 1 && targets.size(0) == hidden.size(0))) &&
                         (!soft || options.teacher_hidden.sizes() == hidden.sizes()) &&
                         (!options.row_weights.defined() || options.row_weights.sizes() == torch::IntArrayRef{hidden.size(0)}) &&
                         (!options.weight_in_compute_dtype.defined() ||
                          (options.weight_in_compute_dtype.sizes() == weight.sizes() &&
                           options.weight_in_compute_dtype.scalar_type() == hidden.scalar_type()));
  if (!shapes_ok) {
    throw std::invalid_argument(cat("linear_cross_entropy: expected hidden [N, H], weight [V, H], targets [N] (or "
                                    "teacher_hidden [N, H]), row_weights [N]; got hidden ",
                                    hidden.sizes(), ", weight ", weight.sizes(),
                                    ", targets ", targets.defined() ? targets.sizes() : torch::IntArrayRef{},
                                    ", teacher_hidden ", soft ? options.teacher_hidden.sizes() : torch::IntArrayRef{},
                                    ", row_weights ",
                                    options.row_weights.defined() ? options.row_weights.sizes() : torch::IntArrayRef{},
                                    ", weight_in_compute_dtype ",
                                    options.weight_in_compute_dtype.defined() ? options.weight_in_compute_dtype.sizes()
                                                                              : torch::IntArrayRef{},
                                    " (in hidden's dtype)"));
  }
  auto present = [](const torch::Tensor& t) { return t.defined() ? c10::optional<torch::Tensor>(t) : c10::nullopt; };
  auto out = LinearCrossEntropyFunction::apply(hidden, weight, present(soft ? torch::Tensor() : targets),
                                               present(options.row_weights),
                                               present(soft ? options.teacher_hidden.detach() : torch::Tensor()),
                                               present(options.weight_in_compute_dtype.defined()
                                                           ? options.weight_in_compute_dtype.detach()
                                                           : torch::Tensor()),
                                               options.chunk_rows, options.argmax);
  return {out[0], out[1]};
}

torch::Tensor linear_cross_entropy_sum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& targets, int64_t chunk_rows) {
  LinearCrossEntropyOptions options;
  options.chunk_rows = chunk_rows;
  return linear_cross_entropy(hidden, weight, targets, options).loss;
}

LmLoss lm_loss(CausalLMImpl& model, const torch::Tensor& hidden, const PackedBatch& batch, int64_t chunk_rows) {
  const NextTokenTargets next = next_token_targets(batch);
  LmLoss out;
  out.num_targets = next.rows.size(0);
  LinearCrossEntropyOptions options;
  options.chunk_rows = chunk_rows;
  options.weight_in_compute_dtype = model.lm_head_compute_values(hidden.scalar_type());
  out.loss_sum =
      linear_cross_entropy(hidden.index_select(0, next.rows), model.lm_head_weight(), next.targets, options).loss;
  return out;
}

}  // namespace topotrain::model
