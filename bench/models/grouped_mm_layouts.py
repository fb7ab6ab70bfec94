#!/usr/bin/env python3
"""Which memory layout of the stacked expert weights makes torch's grouped GEMM
(torch._grouped_mm, CUTLASS on sm90) fastest, forward and backward, at the two MoE shapes the
benchmarks train: the HF Qwen3Moe reference shape (16 experts of 512, hidden 1024, top-8) and
moe-500m (8 experts of 768, hidden 768, top-2), 16384 tokens. The master weights keep HF's
[E, out, in] layout; the bf16 compute copy is made once per step and may take any layout.

For each projection (gate_up: hidden -> 2 * inter; down: inter -> hidden) and each layout of
the weight operand ("view": the transpose of [E, out, in], what the model passes today;
"contiguous": a contiguous [E, in, out] copy) prints the median time of the forward GEMM and
of its backward (input and weight gradients) with CUDA events, and TFLOP/s.

    python3 bench/models/grouped_mm_layouts.py
"""
import torch


def median_ms(fn, reps=30):
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main():
    dev = torch.device("cuda")
    shapes = [("reference (E16 top-8, H1024, I512)", 16, 8, 1024, 512),
              ("moe-500m (E8 top-2, H768, I768)", 8, 2, 768, 768)]
    tokens = 16384
    print(f"{'shape':<36} {'proj':<8} {'layout':<11} {'fwd ms':>7} {'TF/s':>5} {'bwd ms':>7} {'TF/s':>5}")
    for label, experts, k, hidden, inter in shapes:
        rows = tokens * k
        gen = torch.Generator(device=dev).manual_seed(0)
        choice = torch.randint(0, experts, (rows,), device=dev, generator=gen)
        counts = torch.bincount(choice, minlength=experts)
        offs = counts.cumsum(0).to(torch.int32)
        for proj, d_in, d_out in [("gate_up", hidden, 2 * inter), ("down", inter, hidden)]:
            x = torch.randn(rows, d_in, device=dev, dtype=torch.bfloat16)
            master = torch.randn(experts, d_out, d_in, device=dev, dtype=torch.bfloat16) * 0.02
            grad = torch.randn(rows, d_out, device=dev, dtype=torch.bfloat16)
            flop = 2 * rows * d_in * d_out
            for layout in ("view", "contiguous"):
                w = master.transpose(1, 2) if layout == "view" else master.transpose(1, 2).contiguous()
                xl = x.detach().requires_grad_()
                wl = w.detach().requires_grad_()
                fwd = median_ms(lambda: torch._grouped_mm(x, w, offs))
                out = torch._grouped_mm(xl, wl, offs)

                def backward():
                    torch.autograd.grad(out, (xl, wl), grad, retain_graph=True)

                bwd = median_ms(backward)
                print(f"{label:<36} {proj:<8} {layout:<11} {fwd:7.3f} {flop / fwd / 1e9:5.0f} {bwd:7.3f} "
                      f"{2 * flop / bwd / 1e9:5.0f}")


if __name__ == "__main__":
    main()
