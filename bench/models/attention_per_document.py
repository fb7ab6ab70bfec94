#!/usr/bin/env python3
"""One document's causal attention at the HF Qwen3Moe reference shape's heads (16 query heads,
4 KV heads, head_dim 64) as a [1, heads, length, 64] batch through scaled_dot_product_attention,
FlashAttention against cuDNN (each forced), forward + backward, bf16, timed with CUDA events
over 20 calls after 3. TFLOP/s count the causal half of the score matrix, backward 2.5x the
forward. Timing only: each backend gets its own random inputs, so nothing here compares their
results (bench/models/attention_backends.py --dense does, for batched grids).

    python3 bench/models/attention_per_document.py       (on a GPU machine; pip torch)
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)


def milliseconds(backend, length, iters=20):
    make = lambda heads: torch.randn(1, heads, length, 64, device="cuda", dtype=torch.bfloat16)
    q, k, v = (make(h).requires_grad_() for h in (16, 4, 4))
    grad = make(16)
    with sdpa_kernel([backend]):
        def step():
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).backward(grad)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step()
        end.record()
        torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


print("length | flash ms | cudnn ms | flash TFLOP/s | cudnn TFLOP/s")
for length in [512, 1024, 2048, 3072, 4096, 4352, 6144, 8192]:
    flops = 3.5 * 2 * length * length * 16 * 64
    try:
        flash = milliseconds(SDPBackend.FLASH_ATTENTION, length)
        cudnn = milliseconds(SDPBackend.CUDNN_ATTENTION, length)
        print(f"{length} | {flash:.3f} | {cudnn:.3f} | {flops / flash / 1e9:.0f} | {flops / cudnn / 1e9:.0f}", flush=True)
    except Exception as error:  # a backend that refuses a shape says so, the others still run
        print(length, "failed:", str(error).splitlines()[0][:200], flush=True)
