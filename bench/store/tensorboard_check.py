#!/usr/bin/env python3
"""Opens a run's TensorBoard event files in TensorBoard itself and checks what it serves.

    tensorboard_check.py RUN_DIR [--port 6123]

Starts `tensorboard --logdir RUN_DIR --load_fast=false` (the Python loader, as every
TensorBoard install has it), waits for it to load, and asks its HTTP API what a browser's
scalars dashboard would get: the runs, each run's scalar tags, and every tag's points. It
then checks them against RUN_DIR/metrics.jsonl, which the trainer writes beside the events:

  * the run's tensorboard/ directory is one run (every launch's file in it),
  * every metrics.jsonl step of every launch has its train/loss point, equal to float32
    precision (TensorBoard keeps scalars as float32), and train/lr likewise,
  * eval_loss steps have their eval/loss points, and tokens_per_s its perf/tokens_per_s,
  * every tag TensorBoard lists is one the README names (draft/accuracy/<slot> by prefix).

Prints a summary table and exits non-zero naming the first difference. Needs the `tensorboard`
package (a GPU machine's Python has it); the trainer itself needs no Python.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request


def fail(message):
    print(f"tensorboard_check: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def readme_tags():
    readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")
    line = next((l for l in open(readme) if l.startswith("TensorBoard tags: ")), None)
    if line is None:
        fail("README.md has no 'TensorBoard tags:' line")
    return re.findall(r"`([^`]+)`", line)


def get(port, path, params=None):
    url = f"http://127.0.0.1:{port}{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--port", type=int, default=6123)
    args = parser.parse_args()
    events_dir = os.path.join(args.run_dir, "tensorboard")
    metrics_path = os.path.join(args.run_dir, "metrics.jsonl")
    if not os.path.isdir(events_dir):
        fail(f"{events_dir} does not exist (was the run started with --set log.tensorboard=true?)")
    metrics = [json.loads(line) for line in open(metrics_path)]
    # A resumed run repeats no step, but if it did the later launch's value is the curve's.
    by_step = {}
    for m in metrics:
        by_step[m["step"]] = m
    server = subprocess.Popen(["tensorboard", "--logdir", args.run_dir, "--port", str(args.port),
                               "--load_fast=false", "--bind_all"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        tags = {}
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                tags = get(args.port, "/data/plugin/scalars/tags")
                if any("train/loss" in t for t in tags.values()):
                    # Loading is incremental: wait until the loss curve stops growing.
                    points = len(get(args.port, "/data/plugin/scalars/scalars",
                                     {"run": next(iter(tags)), "tag": "train/loss"}))
                    if points >= len(by_step):
                        break
            except OSError:
                pass
            if server.poll() is not None:
                fail(f"tensorboard exited with {server.returncode}: {server.stderr.read()[-2000:]}")
            time.sleep(1)
        runs = get(args.port, "/data/runs")
        if len(runs) != 1 or len(tags) != 1:
            fail(f"expected one run (the tensorboard/ directory), TensorBoard lists runs {runs}, tags of {list(tags)}")
        run = runs[0]
        known = readme_tags()
        for tag in tags[run]:
            named = tag in known or any(k.endswith("<slot>") and tag.startswith(k[:-len("<slot>")]) for k in known)
            if not named:
                fail(f"TensorBoard shows tag {tag}, which README.md's tag list does not name")

        def curve(tag):
            if tag not in tags[run]:
                fail(f"TensorBoard has no {tag} curve (tags: {sorted(tags[run])})")
            return {step: value for _, step, value in get(args.port, "/data/plugin/scalars/scalars",
                                                         {"run": run, "tag": tag})}

        rows = []
        for tag, key in (("train/loss", "loss"), ("train/lr", "lr"), ("perf/tokens_per_s", "tokens_per_s"),
                         ("eval/loss", "eval_loss")):
            expected = {s: m[key] for s, m in by_step.items() if m.get(key) is not None}
            if not expected:
                continue
            got = curve(tag)
            if sorted(got) != sorted(expected):
                fail(f"{tag}: TensorBoard has steps {sorted(got)}, metrics.jsonl {sorted(expected)}")
            worst = max(abs(got[s] - v) / max(abs(v), 1e-30) for s, v in expected.items())
            if worst > 2 ** -23:  # float32's unit roundoff
                fail(f"{tag}: a point differs from metrics.jsonl by {worst:.3g} (relative), more than float32 rounding")
            rows.append((tag, len(got), min(got), max(got), worst))
        launches = sorted({m["launch"] for m in metrics})
        files = sorted(f for f in os.listdir(events_dir) if f.startswith("events.out.tfevents."))
        print(f"TensorBoard {subprocess.run(['tensorboard', '--version_tb'], capture_output=True, text=True).stdout.strip()}"
              f" served run '{run}': {len(tags[run])} scalar tags from {len(files)} event file(s),"
              f" launches {launches} of metrics.jsonl")
        print("| tag | points | steps | max relative difference from metrics.jsonl |")
        print("|---|---|---|---|")
        for tag, n, first, last, worst in rows:
            print(f"| {tag} | {n} | {first}..{last} | {worst:.2g} |")
        print("tensorboard_check: OK")
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main()
