#!/usr/bin/env bash
# store benchmarks: the PhaseTimer's cost per scope (target < 1 µs on CPU) and a 4-rank
# pipeline-shaped demo run whose timing log goes through topotrain-report (text, trace
# and chart). Runs on the CPU machine (build dir `build`) or a GPU machine (BUILD_DIR=build-gpu).
# Results go to $OUT (default bench/store/out).
#   bench/store/run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
out=${OUT:-$root/bench/store/out}
mkdir -p "$out"
cmake --build "$build" --target bench_phase_timer timing_demo topotrain_report -j "${JOBS:-2}" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$build/bin/bench_phase_timer" 200000 | tee "$out/phase_timer.txt"
rm -rf "$out/demo-run"
mpirun --oversubscribe --bind-to none -np 4 "$build/bin/timing_demo" "$out/demo-run" 60
"$build/bin/topotrain-report" "$out/demo-run" --skip 1 --trace "$out/demo-trace.json" --plot "$out/demo-plot.svg" \
  | tee "$out/demo-report.txt"
