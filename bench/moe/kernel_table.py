#!/usr/bin/env python3
"""Device time of one profiled step, by kernel and by kind, from the Chrome trace that
moe_train writes with --set log.profile_step=N (profile-step<N>-rank<R>.json; pip torch's
Kineto). The text summary beside it lists the top 25 activities; this lists them all and
sums them into kinds (attention, grouped GEMM, GEMM, gather/scatter, ...), so that the
share of each lever of the step can be read off, lists where the device sat idle, and sums
the device time by the training phase that launched it (the timer's "phase:<name>" profiler
ranges). A phase's kernel time here against its device time in an unprofiled run
(topotrain-report, CUDA events) is that phase's idle without the profiler's own host cost.
A profile of several steps (log.profile_steps; device only with log.profile_host = false) is
read over its whole steps, between optimizer kernels: each step's busy and idle time and its
idle gaps by length, and the tables per step.

    python3 bench/moe/kernel_table.py RUN_DIR/profile-step25-rank0.json [--top 60] [--calls REGEX]
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
    parser.add_argument("--calls", metavar="REGEX",
                        help="also list every call of the kernels whose name matches, in launch order")
    args = parser.parse_args()
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not device:
        raise SystemExit(f"{args.trace}: no device activities (was it a CUDA run?)")
    # A profile of several steps (log.profile_steps) is read over its whole steps: from the end
    # of the first optimizer kernel to the end of the last, every total divided by their number.
    optimizer_ends = sorted(e["ts"] + e["dur"] for e in device if re.search("adam", e["name"], re.I))
    steps = max(1, len(optimizer_ends) - 1)
    if steps > 1:
        print(f"{steps} whole steps, between the ends of the first and the last optimizer kernel; "
              "times are per step")
        print_steps(events, device, optimizer_ends)
        device = [e for e in device if optimizer_ends[0] <= e["ts"] and e["ts"] + e["dur"] <= optimizer_ends[-1]]
    start = min(e["ts"] for e in device)
    end = max(e["ts"] + e["dur"] for e in device)
    total = sum(e["dur"] for e in device) / steps
    by_name = collections.defaultdict(lambda: [0.0, 0])
    by_kind = collections.defaultdict(lambda: [0.0, 0])
    for e in device:
        by_name[e["name"]][0] += e["dur"] / steps
        by_name[e["name"]][1] += 1 / steps
        by_kind[kind_of(e["name"])][0] += e["dur"] / steps
        by_kind[kind_of(e["name"])][1] += 1 / steps
    print(f"device span {(end - start) / steps / 1e3:.1f} ms, kernel time {total / 1e3:.1f} ms "
          f"({100 * total * steps / (end - start):.0f}% busy), {len(device) / steps:.5g} activities")
    print(f"\n{'kind':<28} {'ms':>8} {'share':>6} {'count':>6}")
    for kind, (us, n) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        print(f"{kind:<28} {us / 1e3:8.2f} {100 * us / total:5.1f}% {n:6.5g}")
    print(f"\n{'ms':>8} {'share':>6} {'count':>6}  kernel")
    for name, (us, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{us / 1e3:8.2f} {100 * us / total:5.1f}% {n:6.5g}  {name[:150]}")
    print_idle_gaps(events, device, start)
    print_phases(events, device, steps)
    if args.calls:
        print_calls(device, args.calls, optimizer_ends if steps > 1 else [start])


def print_calls(device, pattern, step_starts):
    """Each call of the matching kernels: its step (1 for a one-step trace), its start from the
    step's start, its duration. A kernel's calls at one shape can then be set against the same
    kernel timed alone."""
    print(f"\ncalls of kernels matching {pattern!r} (#n: the n-th distinct full name, which long template "
          f"names share the start of):\n{'step':>4} {'at ms':>8} {'us':>9}  kernel")
    distinct = {}
    for e in sorted((e for e in device if re.search(pattern, e["name"])), key=lambda e: e["ts"]):
        step = max(i for i, begin in enumerate(step_starts) if begin <= e["ts"])
        number = distinct.setdefault(e["name"], len(distinct))
        print(f"{step + 1:4d} {(e['ts'] - step_starts[step]) / 1e3:8.2f} {e['dur']:9.1f}  #{number} {e['name'][:80]}")


GAP_BUCKETS_US = (3, 10, 50, 200, 1000, float("inf"))


def print_steps(events, device, optimizer_ends):
    """Each whole step's device span, busy and idle time, and its idle gaps by length. A gap
    whose next activity was launched after the gap began is one the device waited for the host
    in; the rest are the few microseconds between queued kernels."""
    launches = launches_by_correlation(events)
    print(f"{'step':>4} {'span ms':>8} {'busy ms':>8} {'idle ms':>8}  idle by gap length (count, ms); "
          "waiting for a launch")
    for i, (lo, hi) in enumerate(zip(optimizer_ends, optimizer_ends[1:])):
        inside = sorted((e for e in device if lo <= e["ts"] and e["ts"] + e["dur"] <= hi), key=lambda e: e["ts"])
        buckets = [[0, 0.0] for _ in GAP_BUCKETS_US]
        waited, until = [0, 0.0], lo
        for e in inside:
            gap = e["ts"] - until
            if gap > 0:
                bucket = buckets[next(b for b, bound in enumerate(GAP_BUCKETS_US) if gap < bound)]
                bucket[0], bucket[1] = bucket[0] + 1, bucket[1] + gap
                launch = launches.get(e.get("args", {}).get("correlation"))
                if launch is not None and launch["ts"] > until:
                    waited[0], waited[1] = waited[0] + 1, waited[1] + gap
            until = max(until, e["ts"] + e["dur"])
        busy = busy_us(inside)
        lower = (0,) + GAP_BUCKETS_US[:-1]
        text = ", ".join(f"<{bound:g} us {n} {us / 1e3:.2f}" if bound != float("inf") else
                         f">={low:g} us {n} {us / 1e3:.2f}"
                         for low, bound, (n, us) in zip(lower, GAP_BUCKETS_US, buckets) if n)
        print(f"{i + 1:4d} {(hi - lo) / 1e3:8.2f} {busy / 1e3:8.2f} {(hi - lo - busy) / 1e3:8.2f}  {text}; "
              f"{waited[0]} gaps, {waited[1] / 1e3:.2f} ms")


def print_idle_gaps(events, device, start, shortest_us=20.0, listed=12):
    """Where the device waits for the host: stretches of the step with no activity on any stream,
    the longest with the activities either side (a host synchronisation shows as a long gap
    before the first kernel the host issued after it), when the activity after the gap was
    launched, counted from the gap's start (near the gap's length: the device waited for that
    launch), and the innermost host operation that launched it."""
    gaps, busy_until, previous = [], None, None
    for e in sorted(device, key=lambda e: e["ts"]):
        if busy_until is not None and e["ts"] - busy_until >= shortest_us:
            gaps.append((e["ts"] - busy_until, busy_until - start, previous, e))
        if busy_until is None or e["ts"] + e["dur"] > busy_until:
            busy_until, previous = e["ts"] + e["dur"], e
    print(f"\nidle gaps >= {shortest_us:.0f} us: {len(gaps)}, {sum(g[0] for g in gaps) / 1e3:.1f} ms in all")
    launches = launches_by_correlation(events)
    host_ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    print(f"{'gap us':>8} {'at ms':>8} {'launch us':>9}  after -> before (launched by)")
    for gap, at, after, before in sorted(gaps, key=lambda g: -g[0])[:listed]:
        launch = launches.get(before.get("args", {}).get("correlation"))
        lag, by = "", ""
        if launch is not None:
            lag = f"{launch['ts'] - (at + start):+.0f}"
            open_ops = [e for e in host_ops
                        if e["tid"] == launch["tid"] and e["ts"] <= launch["ts"] <= e["ts"] + e["dur"]]
            by = min(open_ops, key=lambda e: e["dur"])["name"][:50] if open_ops else launch["name"]
        print(f"{gap:8.0f} {at / 1e3:8.2f} {lag:>9}  {after['name'][:50]} -> {before['name'][:50]} ({by})")


def launches_by_correlation(events):
    """The host's launch calls (CUDA runtime or driver) by correlation id: a device activity
    shares its launch's id."""
    return {e["args"]["correlation"]: e for e in events
            if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
            and "correlation" in e.get("args", {})}


def busy_us(activities):
    """Time covered by at least one of the activities (streams overlap)."""
    covered, until = 0.0, None
    for e in sorted(activities, key=lambda e: e["ts"]):
        begin, end = e["ts"], e["ts"] + e["dur"]
        if until is None or begin > until:
            covered, until = covered + end - begin, end
        elif end > until:
            covered, until = covered + end - until, end
    return covered


def print_phases(events, device, steps):
    """Each device activity goes to the innermost phase range open on the host when it was
    launched (launch and activity share a correlation id; the backward's launches come from
    autograd's thread while the main thread's backward range is open)."""
    ranges = [(e["ts"], e["ts"] + e["dur"], e["name"][len("phase:"):]) for e in events
              if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name", "").startswith("phase:")]
    if not ranges:
        print("\nno phase ranges in the trace (a device-only profile, or a build from before they were added)")
        return
    launches = launches_by_correlation(events)
    by_phase = collections.defaultdict(list)
    for e in device:
        launch = launches.get(e.get("args", {}).get("correlation"))
        at = launch["ts"] if launch is not None else None
        inside = [r for r in ranges if at is not None and r[0] <= at <= r[1]]
        by_phase[min(inside, key=lambda r: r[1] - r[0])[2] if inside else "(outside every phase)"].append(e)
    if steps > 1:
        print(f"\n{'phase':<24} {'count':>6} {'kernels ms':>11}  (per step)")
        for phase, activities in sorted(by_phase.items(), key=lambda kv: min(e["ts"] for e in kv[1])):
            print(f"{phase:<24} {len(activities) / steps:6.5g} {sum(e['dur'] for e in activities) / steps / 1e3:11.2f}")
        return
    print(f"\n{'phase':<24} {'count':>6} {'kernels ms':>11} {'span ms':>9} {'idle in span ms':>16}")
    for phase, activities in sorted(by_phase.items(), key=lambda kv: min(e["ts"] for e in kv[1])):
        first = min(e["ts"] for e in activities)
        last = max(e["ts"] + e["dur"] for e in activities)
        kernels = sum(e["dur"] for e in activities)
        print(f"{phase:<24} {len(activities):6d} {kernels / 1e3:11.2f} {(last - first) / 1e3:9.2f} "
              f"{(last - first - busy_us(activities)) / 1e3:16.2f}")


if __name__ == "__main__":
    main()
