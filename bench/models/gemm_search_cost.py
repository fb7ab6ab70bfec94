#!/usr/bin/env python3
"""Host time of a bf16 torch.mm on a GPU for a shape cuBLAS has seen against a new one.

cuBLAS keeps its algorithm choice per exact shape; in packed training one GEMM dimension is the
micro-batch's token count, which changes every step. This times 60 calls each (the GPU kept
busy by two 8192^3 products first, so that the time per call is the host's enqueue time) at
the reference MoE shape's projections and an LM-head slice: a fixed token count, then token
counts drawn from 13000..16384, and (for the o projection's shape) the weight-gradient form
with the token count as the inner dimension. Each is run twice; the second pass is the one
to read (the first includes start-up). Then 60 new token counts twice over: a shape seen once
costs what a fixed one does. bench/moe/RESULTS.md ("night, later") quotes its output.

    python3 bench/models/gemm_search_cost.py       (on a GPU machine; pip torch)
"""
import random
import time

import torch


def host_us_per_call(fn, n):
    torch.cuda.synchronize()
    big = torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16)
    big @ big
    big @ big  # the GPU stays busy while the calls below are enqueued
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / n * 1e6


def main():
    torch.manual_seed(0)
    random.seed(0)
    print(torch.__version__, torch.version.cuda, torch.backends.cuda.preferred_blas_library())
    shapes = {"qkv": (1024, 1536), "o": (1024, 1024), "lm_head_slice": (1024, 151936 // 4)}
    for name, (k, n) in shapes.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        xs = {t: torch.randn(t, k, device="cuda", dtype=torch.bfloat16) for t in range(13000, 16385, 7)}
        counts = list(xs)
        fixed = xs[counts[-1]]
        for rep in range(2):
            seen = host_us_per_call(lambda i: torch.mm(fixed, w.t()), 60)
            drawn = random.sample(counts, 60)
            new = host_us_per_call(lambda i: torch.mm(xs[drawn[i]], w.t()), 60)
            inner = (host_us_per_call(lambda i: torch.mm(xs[drawn[i]].t(), xs[drawn[i]]), 60)
                     if name == "o" else float("nan"))
            print(f"{name:14s} pass {rep + 1}: host us/call, fixed count {seen:7.1f}  new counts {new:7.1f}  "
                  f"new counts as the inner dimension {inner:7.1f}")
    w = torch.randn(1536, 1024, device="cuda", dtype=torch.bfloat16)
    xs = [torch.randn(t, 1024, device="cuda", dtype=torch.bfloat16) for t in range(14000, 14060)]
    print("60 new counts, first pass ", host_us_per_call(lambda i: torch.mm(xs[i], w.t()), 60))
    print("the same 60, second pass  ", host_us_per_call(lambda i: torch.mm(xs[i], w.t()), 60))


if __name__ == "__main__":
    main()
