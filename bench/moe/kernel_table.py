#!/usr/bin/env python3
"""Device time of one profiled step, by kernel and by kind, from the Chrome trace that
moe_train writes with --set log.profile_step=N (profile-step<N>-rank<R>.json; pip torch's
Kineto). The text summary beside it lists the top 25 activities; this lists them all and
sums them into kinds (attention, grouped GEMM, GEMM, gather/scatter, ...), so that the
share of each lever of the step can be read off, and lists where the device sat idle.

    python3 bench/moe/kernel_table.py RUN_DIR/profile-step25-rank0.json [--top 60]
"""
import argparse
import collections
import json
import re

KINDS = [  # first match wins; patterns on the kernel name
    ("attention", r"flash|fmha|cudnn|sdpa|attention"),
    ("grouped GEMM", r"grouped|Grouped|GroupProblem"),
    ("GEMM", r"gemm|Gemm|nvjet|xmma|cutlass|cublas|sm90_"),
    ("gather / scatter / index", r"index|gather|scatter|Gather|Scatter|sort|Sort|Radix|radix"),
    ("cross entropy / softmax", r"softmax|log_softmax|cross_entropy|nll|CrossEntropy|topotrain.*entropy|logsumexp"),
    ("optimizer", r"adam|Adam|multi_tensor|foreach"),  # before "own kernels": our AdamW kernel is the optimizer's
    ("own kernels", r"topotrain|rms_norm|norm_rotary|swiglu|expert_combine"),
    ("reduction", r"reduce|Reduce|sum_|norm_kernel"),
    ("copy / cast", r"copy|Copy|Memcpy|Memset|cast|to_copy|fill"),
    ("elementwise", r"elementwise|vectorized|unrolled|Functor"),
    ("nccl", r"nccl|NCCL"),
]


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name):
            return kind
    return "other"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=60)
    args = parser.parse_args()
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not device:
        raise SystemExit(f"{args.trace}: no device activities (was it a CUDA run?)")
    start = min(e["ts"] for e in device)
    end = max(e["ts"] + e["dur"] for e in device)
    total = sum(e["dur"] for e in device)
    by_name = collections.defaultdict(lambda: [0.0, 0])
    by_kind = collections.defaultdict(lambda: [0.0, 0])
    for e in device:
        by_name[e["name"]][0] += e["dur"]
        by_name[e["name"]][1] += 1
        by_kind[kind_of(e["name"])][0] += e["dur"]
        by_kind[kind_of(e["name"])][1] += 1
    print(f"device span {(end - start) / 1e3:.1f} ms, kernel time {total / 1e3:.1f} ms "
          f"({100 * total / (end - start):.0f}% busy), {len(device)} activities")
    print(f"\n{'kind':<28} {'ms':>8} {'share':>6} {'count':>6}")
    for kind, (us, n) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        print(f"{kind:<28} {us / 1e3:8.2f} {100 * us / total:5.1f}% {n:6d}")
    print(f"\n{'ms':>8} {'share':>6} {'count':>6}  kernel")
    for name, (us, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{us / 1e3:8.2f} {100 * us / total:5.1f}% {n:6d}  {name[:150]}")
    print_idle_gaps(device, start)


def print_idle_gaps(device, start, shortest_us=20.0, listed=12):
    """Where the device waits for the host: stretches of the step with no activity on any stream,
    the longest with the activities either side (a host synchronisation shows as a long gap
    before the first kernel the host issued after it)."""
    gaps, busy_until, previous = [], None, None
    for e in sorted(device, key=lambda e: e["ts"]):
        if busy_until is not None and e["ts"] - busy_until >= shortest_us:
            gaps.append((e["ts"] - busy_until, busy_until - start, previous["name"], e["name"]))
        if busy_until is None or e["ts"] + e["dur"] > busy_until:
            busy_until, previous = e["ts"] + e["dur"], e
    print(f"\nidle gaps >= {shortest_us:.0f} us: {len(gaps)}, {sum(g[0] for g in gaps) / 1e3:.1f} ms in all")
    print(f"{'gap us':>8} {'at ms':>8}  after -> before")
    for gap, at, after, before in sorted(gaps, reverse=True)[:listed]:
        print(f"{gap:8.0f} {at / 1e3:8.2f}  {after[:60]} -> {before[:60]}")


if __name__ == "__main__":
    main()
