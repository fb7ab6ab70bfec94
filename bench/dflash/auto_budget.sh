#!/usr/bin/env bash
# train.token_budget = "auto" for dflash_train beside the fixed budget of topology/1t1d.toml,
# on one GPU (the target and the drafter share it over CUDA IPC, each planning with half of
# it), qwen3-0.6b-shaped target, synthetic documents of ~4K tokens, the defaults otherwise
# (checkpoint cadence, logging, clipping). Each run's log and topotrain-report's breakdown
# (warm-up steps left out) go to $OUT (or a temporary folder).
#   bash bench/dflash/auto_budget.sh          (from the project root; builds into build-gpu)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
source bench/dflash/bench_setup.sh
sed -e 's/^devices = \[1\]/devices = [0]/' -e 's/^hidden_states = .*/hidden_states = "ipc"/' topology/1t1d.toml \
  > "$work/one-gpu.toml"
for run in fixed auto; do
  extra=()
  [[ $run == auto ]] && extra=(--set train.token_budget=auto)
  timeout "${RUN_TIMEOUT_S:-300}" mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH \
    "$bin/dflash_train" "$work/one-gpu.toml" --set model.preset=qwen3-0.6b --set data.path="$work/docs.h5" \
    --set train.max_steps="${STEPS:-24}" --set log.every=4 --set checkpoint.dir="$work" \
    --set checkpoint.run="dflash-$run" "${extra[@]}" > "$results/dflash-$run.log" 2>&1
  echo "## $run"
  grep -E 'token_budget = "auto":|drafter\] step |drafter done|target stream' "$results/dflash-$run.log" |
    sed 's/^.*\] //'
  "$bin/topotrain-report" "$work/dflash-$run" --skip 4 | tee "$results/dflash-$run-report.txt"
done
