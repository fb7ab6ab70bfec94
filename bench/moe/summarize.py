#!/usr/bin/env python3
"""Numbers for bench/moe/run.sh.

  summarize.py timings RUN_DIR --skip K   one moe_train run's throughput from its timings.h5, as JSON
  summarize.py table RESULTS_DIR          the summary table (markdown) from <config>.tt.json / .ref.json
  summarize.py users USERS_DIR            what users get (markdown): each row's tok/s against the
                                          idealised row of its group, and its largest checkpoint stall

Per step, tokens are the sum of the ranks' rows (each moe_train rank records its own tokens,
as topotrain-report expects) and the step time is the slowest rank's wall time. The run's last
step is left out as well as the first K: it also writes the final checkpoint. An MoE run's
expert load is the mean over those steps and ranks of the peak expert load (moe_train's
progress line `load`: 1 is an even split, experts / top_k every token to the same experts),
which the experts' weight-gradient GEMMs' speed depends on (RESULTS.md, "2026-12-04, later");
the reference's (reference_train.py's expert_load_last) is the same figure for its last
micro-batch.
"""
import argparse
import glob
import json
import math
import os
import sys

COMM_PHASES = ("comm_wait", "send", "recv")


def read_table(f, name):
    fields = f[name].attrs["fields"]
    if isinstance(fields, bytes):
        fields = fields.decode()
    return f[name][:], {field: i for i, field in enumerate(str(fields).split(","))}


def timings(run_dir, skip):
    import h5py

    path = os.path.join(run_dir, "timings.h5") if os.path.isdir(run_dir) else run_dir
    if not os.path.exists(path):
        raise SystemExit(f"summarize.py: {path} does not exist (did moe_train run and finish?)")
    with h5py.File(path, "r") as f:
        world = int(f.attrs["world_size"])
        steps, col = read_table(f, "steps")
        ranks, rcol = read_table(f, "ranks")
    by_step = {}
    for row in steps:
        by_step.setdefault(int(row[col["step"]]), []).append(row)
    all_steps = sorted(by_step)
    measured = [s for s in all_steps[skip:-1] if len(by_step[s]) == world]
    if not measured:
        raise SystemExit(f"summarize.py: {path} has {len(all_steps)} steps; none left after skipping {skip} and the last")
    total_tokens = total_wall = comm = wall_rows = 0.0
    for s in measured:
        rows = by_step[s]
        tokens = [float(r[col["tokens"]]) for r in rows]
        total_tokens += sum(tokens)  # each rank's row holds its own tokens
        total_wall += max(float(r[col["wall"]]) for r in rows)
        for r in rows:
            wall_rows += float(r[col["wall"]])
            comm += sum(float(r[col[p]]) for p in COMM_PHASES if p in col)
    stall = max((float(r[col["checkpoint"]]) for s in measured for r in by_step[s]), default=0.0) \
        if "checkpoint" in col else 0.0
    tokens_per_s = total_tokens / total_wall
    loads = [float(r[col["peak_expert_load"]]) for s in measured for r in by_step[s]] \
        if "peak_expert_load" in col else []
    loads = [v for v in loads if math.isfinite(v)]
    flops = float(ranks[0][rcol["flops_per_token"]]) if "flops_per_token" in rcol else 0.0
    peak = float(ranks[0][rcol["peak_flops"]]) if "peak_flops" in rcol else 0.0
    return dict(impl="topotrain", world=world, steps_measured=len(measured), first_step=measured[0],
                last_step=measured[-1], tokens_per_s=tokens_per_s, tokens_per_s_per_gpu=tokens_per_s / world,
                mfu=flops * tokens_per_s / (peak * world) if flops > 0 and peak > 0 else None,
                comm_share=comm / wall_rows if wall_rows > 0 else None,
                step_ms=1e3 * total_wall / len(measured), checkpoint_stall_ms=1e3 * stall,
                expert_load=sum(loads) / len(loads) if loads else None)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fmt_rate(result):
    return f"{result['tokens_per_s'] / 1e3:,.1f}K" if result else "n/a"


def fmt_share(value):
    return f"{100 * value:.1f}%" if value is not None else "n/a"


def fmt_load(result, key="expert_load"):
    return f"{result[key]:.2f}" if result and result.get(key) is not None else "n/a"


def table(results_dir):
    configs = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*.config.json"))):
        config = load(path)
        if config:
            configs.append(config)
    configs.sort(key=lambda c: c["order"])
    results = {c["name"]: (load(os.path.join(results_dir, c["name"] + ".tt.json")),
                           load(os.path.join(results_dir, c["name"] + ".ref.json"))) for c in configs}
    one_gpu = {c["grad_accum"]: results[c["name"]] for c in configs if c["gpus"] == 1}

    def scaling(config, index):
        base = one_gpu.get(config["grad_accum"], (None, None))[index]
        mine = results[config["name"]][index]
        if config["gpus"] == 1 or not base or not mine:
            return None
        return mine["tokens_per_s"] / (config["gpus"] * base["tokens_per_s"])

    lines = ["| config | topotrain tok/s (per GPU) | reference tok/s (per GPU) | ratio | MFU topotrain / ref "
             "| comm % | scaling eff. topotrain / ref | expert load topotrain / ref |",
             "|---|---|---|---|---|---|---|---|"]
    for config in configs:
        tt, ref = results[config["name"]]
        ratio = f"{tt['tokens_per_s'] / ref['tokens_per_s']:.2f}x" if tt and ref else "n/a"
        per_gpu = lambda r: f"{fmt_rate(r)} ({r['tokens_per_s_per_gpu'] / 1e3:,.1f}K)" if r else "n/a"
        mfu = " / ".join(fmt_share(r.get("mfu")) if r else "-" for r in (tt, ref))
        scale = " / ".join(fmt_share(scaling(config, i)) if config["gpus"] > 1 else "-" for i in (0, 1))
        lines.append(f"| {config['label']} | {per_gpu(tt)} | {per_gpu(ref)} | {ratio} | {mfu} | "
                     f"{fmt_share(tt.get('comm_share')) if tt else 'n/a'} | {scale} | "
                     f"{fmt_load(tt)} / {fmt_load(ref, 'expert_load_last')} |")
    return "\n".join(lines)


def users(users_dir):
    rows = []
    for path in glob.glob(os.path.join(users_dir, "*.config.json")):
        config, result = load(path), load(path.replace(".config.json", ".json"))
        if config and result:
            rows.append((config, result))
    rows.sort(key=lambda r: r[0]["order"])
    ideal = {c["group"]: r for c, r in rows if c["kind"] == "idealised"}
    lines = ["| run | tok/s (per GPU) | vs idealised | step ms | largest checkpoint stall ms | MFU | expert load |",
             "|---|---|---|---|---|---|---|"]
    for config, r in rows:
        base = ideal.get(config["group"])
        versus = f"{100 * r['tokens_per_s'] / base['tokens_per_s']:.1f}%" if base else "n/a"
        lines.append(f"| {config['label']} | {fmt_rate(r)} ({r['tokens_per_s_per_gpu'] / 1e3:,.1f}K) | {versus} | "
                     f"{r['step_ms']:.1f} | {r.get('checkpoint_stall_ms', 0):.1f} | {fmt_share(r.get('mfu'))} | "
                     f"{fmt_load(r)} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("timings")
    t.add_argument("run_dir")
    t.add_argument("--skip", type=int, default=3)
    s = sub.add_parser("table")
    s.add_argument("results_dir")
    u = sub.add_parser("users")
    u.add_argument("users_dir")
    args = parser.parse_args()
    if args.command == "timings":
        print(json.dumps(timings(args.run_dir, args.skip)))
    elif args.command == "table":
        print(table(args.results_dir))
    else:
        print(users(args.users_dir))


if __name__ == "__main__":
    sys.exit(main())
