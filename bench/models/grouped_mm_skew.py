#!/usr/bin/env python3
"""Expert grouped GEMMs (torch._grouped_mm, CUTLASS on sm90) at the HF Qwen3Moe reference shape
(16 experts of 512, hidden 1024, top-8; ~14.1K tokens, so 112800 rows) under four routings:
equal expert loads, loads drawn with weights rand + 0.5, with weights 1/(i+1), and one expert
4x the others. For each projection it prints the median time (CUDA events, 20 calls) of the
forward (x @ W^T, W the [E, out, in] weight as the model passes it), the input gradient as
autograd computes it (grad @ W) and the weight gradient (x^T @ grad, grouped along the rows).
bench/moe/RESULTS.md ("2026-12-04") sets these against the same GEMMs inside a training step.

    python3 bench/models/grouped_mm_skew.py       (on a GPU machine; pip torch)
"""
import torch

from grouped_mm_layouts import median_ms  # this script's folder is on the path

DEV = "cuda"
E, H, I, T, K = 16, 1024, 512, 14100, 8
ROWS = T * K


def main():
    gen = torch.Generator().manual_seed(0)
    loads = {
        "equal": torch.ones(E),
        "rand+0.5": torch.rand(E, generator=gen) + 0.5,
        "1/(i+1)": 1.0 / torch.arange(1, E + 1).float(),
        "one expert 4x": torch.tensor([4.0] + [1.0] * (E - 1)),
    }
    for name, weights in loads.items():
        counts = torch.distributions.Multinomial(ROWS, weights / weights.sum()).sample().long()
        offs = counts.cumsum(0).to(torch.int32).to(DEV)
        line = [f"{name:14} max/mean {counts.max().item() / counts.float().mean().item():4.2f}"]
        for proj, out_dim, in_dim in (("gate_up", 2 * I, H), ("down", H, I)):
            w = torch.randn(E, out_dim, in_dim, device=DEV, dtype=torch.bfloat16) * 0.02
            x = torch.randn(ROWS, in_dim, device=DEV, dtype=torch.bfloat16)
            grad = torch.randn(ROWS, out_dim, device=DEV, dtype=torch.bfloat16)
            fwd = median_ms(lambda: torch._grouped_mm(x, w.transpose(1, 2), offs), reps=20)
            dgrad = median_ms(lambda: torch._grouped_mm(grad, w, offs), reps=20)
            wgrad = median_ms(lambda: torch._grouped_mm(x.t(), grad, offs), reps=20)
            line.append(f"{proj}: fwd {fwd * 1e3:4.0f} dgrad {dgrad * 1e3:4.0f} wgrad {wgrad * 1e3:4.0f} us")
        print("  ".join(line))


if __name__ == "__main__":
    main()
