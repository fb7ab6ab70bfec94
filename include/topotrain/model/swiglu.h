// SwiGLU of a fused gate/up projection.
#pragma once

#include <torch/torch.h>

namespace topotrain::model {

// gate_up [rows, 2 * inner] = [gate | up] along the last dim -> silu(gate) * up [rows, inner].
// One kernel each way for bf16 on CUDA (inner % 8 == 0), rounding once where torch's silu
// and mul round twice; torch ops otherwise.
torch::Tensor swiglu(const torch::Tensor& gate_up);

}  // namespace topotrain::model
