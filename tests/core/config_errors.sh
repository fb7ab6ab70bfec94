#!/usr/bin/env bash
# Configuration errors end a job before it starts, in --dry-run as in a real run: exit 2,
# the message printed once (by rank 0), and nothing that says otherwise (no orderly-stop
# message from the ranks mpirun signals, no MPI_Abort). A GPU topology's --dry-run on a
# node without GPUs prints the map with a warning and exits 0 (tests/core/CMakeLists.txt).
#   config_errors.sh BIN_DIR [gpu-topology]
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun=(timeout --kill-after=5 60 mpirun --oversubscribe --allow-run-as-root --bind-to none)
failures=0

run() {  # run NAME ARGS...: output in $work/NAME.log, exit code in $code
  local name=$1
  shift
  "${mpirun[@]}" "$@" >"$work/$name.log" 2>&1
  code=$?
}

fail() {
  echo "FAIL $1: $2"
  sed 's/^/    /' "$work/$1.log"
  failures=$((failures + 1))
}

expect_config_error() {  # expect_config_error NAME REGEX ARGS...
  local name=$1 regex=$2
  shift 2
  run "$name" "$@"
  if [[ $code -ne 2 ]]; then fail "$name" "exit $code, expected 2"; return; fi
  local n
  n=$(grep -Ec -- "$regex" "$work/$name.log")
  if [[ $n -ne 1 ]]; then fail "$name" "the message /$regex/ appears $n times, expected once"; return; fi
  if grep -Eq "stop requested|MPI_Abort|MPI_ABORT" "$work/$name.log"; then fail "$name" "misleading output"; return; fi
  echo "ok   $name: $(grep -E -- "$regex" "$work/$name.log" | head -1 | cut -c1-150)"
}

moe=("$bin/moe_train" topology/cpu4.toml)
dflash=("$bin/dflash_train" topology/cpu-2t2d.toml)
small_vocab=tests/train/small-vocab-config.json

if [[ ${2:-} == gpu-topology ]]; then
  run gpu_dry_run -np 4 "$bin/moe_train" topology/pcie4x4.toml --dry-run
  if [[ $code -ne 0 ]]; then fail gpu_dry_run "exit $code, expected 0"
  elif ! grep -Pq '^3\ttrainer\tcuda:3\t' "$work/gpu_dry_run.log"; then fail gpu_dry_run "no full rank map"
  elif ! grep -q "^\[model\]" "$work/gpu_dry_run.log"; then fail gpu_dry_run "no resolved settings"
  elif [[ $(grep -c "warning: .*is placed on cuda:0.*a real run on this node refuses it" "$work/gpu_dry_run.log") -ne 1 ]]; then
    fail gpu_dry_run "no single warning that this node lacks the GPUs"
  else echo "ok   gpu_dry_run: map, settings and one warning"; fi
  expect_config_error gpu_real_run "rank 0 \(trainer\) is placed on cuda:0" -np 4 "$bin/moe_train" topology/pcie4x4.toml
  # A key only the other job reads would do nothing: refused.
expect_config_error moe_dflash_key "--set: train.anchors is a dflash_train setting; moe_train does not read it" \
  -np 4 "${moe[@]}" --set train.anchors=64 --dry-run
exit $((failures > 0))
fi

for mode in dry real; do
  extra=()
  [[ $mode == dry ]] && extra=(--dry-run)
  expect_config_error "${mode}_preset" "unknown model preset 'tiny-mo'" -np 4 "${moe[@]}" --set model.preset=tiny-mo "${extra[@]}"
  expect_config_error "${mode}_vocab" "dataset '.*demo.h5' has vocab_size 259 .* embeds only vocab_size 200" \
    -np 4 "${moe[@]}" --set model.config=$small_vocab --set checkpoint.dir="$work" "${extra[@]}"
  expect_config_error "${mode}_weights" "model.weights = \"$work/nothing\": no such file" \
    -np 4 "${moe[@]}" --set model.weights="$work/nothing" --set checkpoint.dir="$work" "${extra[@]}"
done
expect_config_error dry_token_budget "train.token_budget" -np 4 "${moe[@]}" --set train.token_budget=-5 --dry-run
# A budget whose one micro-batch cannot fit the machine: refused before training, not an
# allocator's stack trace (the check is a lower bound, so any machine refuses 2^31 - 1 tokens).
expect_config_error auto_word "setting 'train.token_budget' takes an integer or \"auto\", got 'atuo'" \
  -np 4 "${moe[@]}" --set train.token_budget=atuo --dry-run
expect_config_error fraction_without_auto "train.memory_fraction \(--set\) only acts with train.token_budget = \"auto\"" \
  -np 4 "${moe[@]}" --set train.memory_fraction=0.5 --dry-run
budget="train.token_budget = 2147483647 \(--set\) cannot fit a"
expect_config_error huge_token_budget "$budget trainer rank: .* GiB of this machine's RAM: use a train.token_budget below [0-9]+" \
  -np 4 "${moe[@]}" --set train.token_budget=2147483647
expect_config_error dry_huge_token_budget "$budget trainer rank" -np 4 "${moe[@]}" --set train.token_budget=2147483647 --dry-run
expect_config_error dflash_huge_token_budget "$budget target rank: .* GiB of this machine's RAM" \
  -np 4 "${dflash[@]}" --set train.token_budget=2147483647
expect_config_error dry_lr "train.lr" -np 4 "${moe[@]}" --set train.lr=-1e-4 --dry-run
expect_config_error dry_warmup "train.warmup" -np 4 "${moe[@]}" --set train.warmup=1.5 --dry-run
expect_config_error dry_schedule "train.schedule = \"steps\" .* needs the schedule's length" \
  -np 4 "${moe[@]}" --set train.schedule=steps --dry-run
expect_config_error dry_dflash_taps "model.taps = \"1,x\"" -np 4 "${dflash[@]}" --set model.taps=1,x --dry-run
expect_config_error dry_dflash_vocab "has vocab_size 259 .* embeds only vocab_size 200" \
  -np 4 "${dflash[@]}" --set model.config=$small_vocab --dry-run
# dflash_train reads the held-out settings, with moe_train's errors.
expect_config_error dry_dflash_eval_every "train.eval_every = 2 \(--set\) has nothing to evaluate: set data.eval_path" \
  -np 4 "${dflash[@]}" --set train.eval_every=2 --dry-run
expect_config_error dry_dflash_eval_both "data.eval_path \(--set\) and data.eval_fraction \(--set\) both name held-out documents" \
  -np 4 "${dflash[@]}" --set data.eval_path=held.h5 --set data.eval_fraction=0.1 --dry-run
# A key only the other job reads would do nothing: refused.
expect_config_error moe_dflash_key "--set: train.anchors is a dflash_train setting; moe_train does not read it" \
  -np 4 "${moe[@]}" --set train.anchors=64 --dry-run
# The other job's topology file (which sets that job's keys) is named for its roles first.
expect_config_error moe_dflash_topology "role = \"target\" is not a role of moe_train" \
  -np 4 "$bin/moe_train" topology/cpu-2t2d.toml --dry-run
# --set cannot reach the topology's tables: said, with where they are.
expect_config_error set_topology_table "--set links.queue_depth=2: \[links\] is a table of the topology file" \
  -np 4 "${dflash[@]}" --set links.queue_depth=2 --dry-run
exit $((failures > 0))
