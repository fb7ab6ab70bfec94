#!/usr/bin/env python3
"""Causal attention over packed micro-batches of documents of several lengths at the HF Qwen3Moe
reference shape's heads (16 query heads, 4 KV heads, head_dim 64), forward + backward, bf16:
FlashAttention-2's one varlen call (what moe_train runs for short documents) against cuDNN's
dense kernel once per document over a window of the packed q/k/v (moe_train's
`document_windows`, src/model/attention.cpp): the window starts at the document and runs on
into the next for the document's length rounded up ("exact": not rounded; 16 or 8 sizes per
power of two), its rows past the document dropped from the output and given a zero output
gradient; the last document's window is a zero-tailed copy. Copies are counted in the time.

Micro-batches: documents of uniform random length in [MIN, MAX] packed whole into BUDGET tokens,
as bench/moe/make_dataset.py and the packer make them. Per layer times are CUDA-event means over
3 passes after a first pass, which also builds cuDNN's plans (its wall time is printed).
TFLOP/s count the causal half of each document's score matrix, backward 2.5x the forward.
Also prints the largest differences between the two results on the first micro-batch, and first
which share of 20000 such micro-batches moe_train sends to the windows
(`runs_in_windows`: every document >= 2048 tokens, >= 3072 on average) and which only the first
bound would.

    python3 bench/models/attention_windows.py [BATCHES] [MIN MAX]   (GPU machine; pip torch)
"""
import random
import sys
import time

import torch

H, HKV, D = 16, 4, 64
SCALE = D ** -0.5
BUDGET = 16384
ops = torch.ops.aten
bf16 = dict(device="cuda", dtype=torch.bfloat16)


def pack(batches, low, high):
    packed, current = [], []
    while len(packed) < batches:
        length = random.randint(low, high)
        if sum(current) + length > BUDGET:
            packed.append(current)
            current = []
        current.append(length)
    return packed


def rounding(sizes_per_octave):
    def rows(length):
        if sizes_per_octave == "exact":
            return length
        step = max(64, (1 << (length - 1).bit_length()) // sizes_per_octave)
        return (length + step - 1) // step * step
    return rows


def flash(batch):
    q, k, v, dout, cu, longest = batch["q"], batch["k"], batch["v"], batch["dout"], batch["cu"], batch["longest"]
    out, lse, rng, unused, _ = ops._flash_attention_forward(q, k, v, cu, cu, longest, longest, 0.0, True, False,
                                                            scale=SCALE)
    dq, dk, dv = ops._flash_attention_backward(dout, q, k, v, out, lse, cu, cu, longest, longest, 0.0, True, rng,
                                               unused, scale=SCALE)
    return out, dq, dk, dv


def window_of(packed, begin, rows):
    held = min(rows, packed.size(0) - begin)
    window = packed[begin:begin + held]
    if held < rows:
        padded = torch.zeros(rows, *packed.shape[1:], **bf16)
        padded[:held] = window
        window = padded
    return window.unsqueeze(0).transpose(1, 2)


def windows(batch, rows_of):
    q, k, v, dout = batch["q"], batch["k"], batch["v"], batch["dout"]
    documents, kept, begin = [], [], 0
    for length in batch["lengths"]:
        rows = rows_of(length)
        qw, kw, vw = (window_of(t, begin, rows) for t in (q, k, v))
        result = ops._scaled_dot_product_cudnn_attention(qw, kw, vw, None, True, 0.0, True, False, scale=SCALE)
        documents.append(result[0][0, :, :length].transpose(0, 1))
        kept.append((begin, length, rows, qw, kw, vw, result))
        begin += length
    out = torch.cat(documents)
    longest_tail = max(rows - length for _, length, rows, *_ in kept)
    zeros = torch.zeros(longest_tail, H, D, **bf16)
    pieces = []
    for begin, length, rows, *_ in kept:
        pieces += [dout[begin:begin + length], zeros[:rows - length]]
    grads, row, dq, dk, dv = torch.cat(pieces), 0, [], [], []
    for begin, length, rows, qw, kw, vw, result in kept:
        o, lse, cq, ck, mq, mk, seed, offset, _ = result
        g = grads[row:row + rows].unsqueeze(0).transpose(1, 2)
        row += rows
        gq, gk, gv = ops._scaled_dot_product_cudnn_attention_backward(g, qw, kw, vw, o, lse, seed, offset, None, cq,
                                                                      ck, mq, mk, 0.0, True, scale=SCALE)
        for into, grad in ((dq, gq), (dk, gk), (dv, gv)):
            into.append(grad[0, :, :length].transpose(0, 1))
    return out, torch.cat(dq), torch.cat(dk), torch.cat(dv)


def timed(name, fn, batches):
    torch.cuda.synchronize()
    started = time.time()
    for batch in batches:
        fn(batch)
    torch.cuda.synchronize()
    first = time.time() - started
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        for batch in batches:
            fn(batch)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / 3 / len(batches)
    flops = sum(3.5 * 2 * n * n * H * D for b in batches for n in b["lengths"]) / len(batches)
    print(f"{name:28s} {ms:.3f} ms per layer | {flops / ms / 1e9:.0f} TFLOP/s | first pass {first:.2f} s", flush=True)
    return ms


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    low, high = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (2048, 6144)
    random.seed(0)
    sample = pack(20000, low, high)
    long_enough = [b for b in sample if min(b) >= 2048]
    windowed = [b for b in long_enough if sum(b) >= 3072 * len(b)]
    print(f"micro-batches sent to windows: {len(windowed) / len(sample):.2%} "
          f"(every document >= 2048 alone: {len(long_enough) / len(sample):.2%})")
    random.seed(0)
    torch.manual_seed(0)
    batches = []
    for lengths in pack(count, low, high):
        tokens = sum(lengths)
        qkv = torch.randn(tokens, H + 2 * HKV, D, **bf16)  # the fused projection's layout: v a column slice
        cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), device="cuda", dtype=torch.int32)
        batches.append(dict(lengths=lengths, q=qkv[:, :H], k=qkv[:, H:H + HKV], v=qkv[:, H + HKV:], cu=cu,
                            dout=torch.randn(tokens, H, D, **bf16), longest=max(lengths)))
    print(f"documents of {low}-{high} tokens, {count} micro-batches of "
          f"{sum(sum(b['lengths']) for b in batches) / count:.0f} tokens on average")
    base = timed("flash varlen (one call)", flash, batches)
    for sizes in ["exact", 16, 8]:
        ms = timed(f"cuDNN windows ({sizes})", lambda b, r=rounding(sizes): windows(b, r), batches)
        print(f"  flash / windows {base / ms:.3f}")
    for name, a, b in zip(["out", "dq", "dk", "dv"], flash(batches[0]), windows(batches[0], rounding(16))):
        print(f"{name}: max |flash - windows| {(a.float() - b.float()).abs().max().item():.3g} "
              f"(max |flash| {a.float().abs().max().item():.3g})")


if __name__ == "__main__":
    main()
