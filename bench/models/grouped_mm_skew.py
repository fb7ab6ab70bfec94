#!/usr/bin/env python3
"""Expert grouped GEMMs (torch._grouped_mm, CUTLASS on sm90) at the HF Qwen3Moe reference shape
(16 experts of 512, hidden 1024, top-8; ~14.1K tokens, so 112800 rows) under six routings:
equal expert loads, loads drawn with weights rand + 0.5, with weights 1/(i+1), one expert 4x
the others, and the collapse the reference shape trains in (every token to the same 8 experts,
bench/moe/RESULTS.md "2026-12-04, later"), alone and with the 0-4 stray rows the other 8
experts get in training. For each projection it prints the median time (CUDA events, 20 calls)
of the forward (x @ W^T, W the [E, out, in] weight as the model passes it), the input gradient
as autograd computes it (grad @ W) and the weight gradient (x^T @ grad, grouped along the rows);
then the weight gradient with the empty experts' groups moved after the others ("empty last":
the rows keep their order, the groups' outputs would be permuted back), the one reordering that
needs no rows moved; and with the groups busiest first (rows and weights moved into that order:
bench/moe/RESULTS.md "2026-12-06, later" tried it in training). bench/moe/RESULTS.md ("2026-12-04") sets these against the same GEMMs
inside a training step.

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
    routings = {name: torch.distributions.Multinomial(ROWS, w / w.sum()).sample().long() for name, w in loads.items()}
    busy = torch.randperm(E, generator=gen)[: E // 2]
    collapsed = torch.zeros(E, dtype=torch.long).index_fill_(0, busy, ROWS // (E // 2))
    routings["8 of 16"] = collapsed
    routings["8 of 16+stray"] = torch.where(collapsed > 0, collapsed, torch.randint(0, 5, (E,), generator=gen))
    for name, counts in routings.items():
        offs = counts.cumsum(0).to(torch.int32).to(DEV)
        empty_last = counts[torch.argsort((counts == 0).to(torch.int8), stable=True)].cumsum(0).to(torch.int32).to(DEV)
        busiest_first = counts.sort(stable=True, descending=True).values.cumsum(0).to(torch.int32).to(DEV)
        line = [f"{name:14} max/mean {counts.max().item() / counts.float().mean().item():4.2f}"]
        for proj, out_dim, in_dim in (("gate_up", 2 * I, H), ("down", H, I)):
            w = torch.randn(E, out_dim, in_dim, device=DEV, dtype=torch.bfloat16) * 0.02
            rows = int(counts.sum())
            x = torch.randn(rows, in_dim, device=DEV, dtype=torch.bfloat16)
            grad = torch.randn(rows, out_dim, device=DEV, dtype=torch.bfloat16)
            fwd = median_ms(lambda: torch._grouped_mm(x, w.transpose(1, 2), offs), reps=20)
            dgrad = median_ms(lambda: torch._grouped_mm(grad, w, offs), reps=20)
            wgrad = median_ms(lambda: torch._grouped_mm(x.t(), grad, offs), reps=20)
            last = median_ms(lambda: torch._grouped_mm(x.t(), grad, empty_last), reps=20)
            busiest = median_ms(lambda: torch._grouped_mm(x.t(), grad, busiest_first), reps=20)
            line.append(f"{proj}: fwd {fwd * 1e3:4.0f} dgrad {dgrad * 1e3:4.0f} wgrad {wgrad * 1e3:4.0f} "
                        f"(empty last {last * 1e3:4.0f}, busiest first {busiest * 1e3:4.0f}) us")
        print("  ".join(line))


if __name__ == "__main__":
    main()
