#!/usr/bin/env bash
# What a checkpoint's background write costs the training steps beside it, and where that
# comes from. moe-500m on one GPU at grad_accum 1, 16384-token micro-batches of ~2K-token
# documents: its ~75 ms steps are far shorter than the ~2-4 s write of its 5.56 GiB state, so at
# checkpoint.every_steps = 10 most steps run beside a write (later checkpoints are deferred
# while one is written). Runs, interleaved, ROUNDS times (default 2), STEPS steps each
# (default 60):
#   idealised         checkpoints off, no clipping, no progress lines (run.sh's idealised rows)
#   idealised + dd    the same while another process writes 5.6 GiB files into /dev/shm in a
#                     loop: a write's load on the machine (memory traffic, page cache) without
#                     the trainer's own part in it
#   every10 shm       checkpoint.every_steps = 10, written into /dev/shm (tmpfs)
#   every10 disk      the same, written into $TMPDIR (default /tmp; a disk)
# Per run: tok/s over the steps after the first SKIP (default 5) and before the last
# (summarize.py), against the mean of the idealised runs; topotrain-report's checkpoint phase
# mean (the host's snapshot stall, and the device's wait in the step after a snapshot for its
# device-to-host copy, which outlasts such a step's forward and backward; builds before aa1ab50
# counted that wait in the optimizer phase), its optimizer mean and p50, and its "beside a
# checkpoint write" line; the write times from the log. Tables and logs go to $OUT (default: a
# new temporary folder). SMOKE=1 runs it all on one CPU rank with tiny-moe and small files, as a
# check of the script. Each run's timings.h5 is kept in $OUT as NAME.timings.h5 (per-step phases),
# and each every-10 run is set against its round's idealised one step by step in
# NAME.compare.txt (topotrain-report --compare).
#   SKIP_BUILD=1 bash bench/moe/checkpoint_interference.sh   (from the project root)
set -uo pipefail
# shellcheck source=bench/moe/one_gpu_setup.sh
source "$(dirname "$0")/one_gpu_setup.sh"
steps=${STEPS:-60} skip=${SKIP:-5} rounds=${ROUNDS:-2} python=${PYTHON:-python3}
if [[ ${SMOKE:-0} == 1 ]]; then
  preset=tiny-moe budget=256 load_mb=100 devices='"cpu"' steps=25 rounds=1
  data_args=(--tokens 200000 --mean-len 300 --vocab 512)
else
  preset=moe-500m budget=16384 load_mb=5700 devices='[0]'
  data_args=(--tokens 8000000 --mean-len 2048)
fi
build_unless_skipped interference
# shellcheck source=/dev/null
source launch/env.sh
shm=$(mktemp -d /dev/shm/ckpt-bench.XXXXXX) disk=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-bench.XXXXXX")
background=
trap '[[ -n $background ]] && kill "$background" 2>/dev/null; rm -rf "$shm" "$disk"' EXIT
one_rank_topology "$shm/one.toml" "$devices"
"$python" bench/moe/make_dataset.py "$shm/docs.h5" "${data_args[@]}" >/dev/null || exit 1

table=$OUT/interference.md
{ printf '| run | tok/s | vs idealised | checkpoint ms mean | optimizer ms mean / p50 |'
  printf ' steps beside a write: p50 against without | writes s |\n'; } >"$table"
echo "|---|---|---|---|---|---|---|" >>"$table"
declare -a rows ideal_tps

train() {  # NAME KIND DIR: KIND idealised|every10
  local name=$1 kind=$2 dir=$3
  local -a settings=(--set checkpoint.every_steps=10)
  [[ $kind == idealised ]] && settings=(--set checkpoint.every_steps=-1 --set train.clip=0 --set log.every=100000)
  rm -rf "$dir/runs"
  timeout 300 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH -x OMP_NUM_THREADS \
    "$BUILD_DIR/bin/moe_train" "$shm/one.toml" --set "model.preset=$preset" --set "data.path=$shm/docs.h5" \
    --set "train.token_budget=$budget" --set "train.max_steps=$steps" --set train.lr=6e-4 \
    --set "checkpoint.dir=$dir/runs" --set checkpoint.run=r "${settings[@]}" >"$OUT/$name.log" 2>&1
}

measure() {  # NAME LABEL KIND DIR [dd]
  local name=$1 label=$2 kind=$3 dir=$4
  if [[ ${5:-} == dd ]]; then
    ( while :; do dd if=/dev/zero of="$shm/load" bs=1M count="$load_mb" status=none; rm -f "$shm/load"; done ) &
    background=$!
  fi
  train "$name" "$kind" "$dir"
  local rc=$?
  if [[ -n $background ]]; then kill "$background"; wait "$background" 2>/dev/null; background=; rm -f "$shm/load"; fi
  if (( rc != 0 )); then echo "$label: moe_train failed (rc $rc), see $OUT/$name.log"; return; fi
  local tps report checkpoint optimizer beside writes
  tps=$("$python" bench/moe/summarize.py timings "$dir/runs/r" --skip "$skip" |
        "$python" -c 'import json, sys; print(round(json.load(sys.stdin)["tokens_per_s"]))')
  report=$("$BUILD_DIR/bin/topotrain-report" "$dir/runs/r" --skip "$skip" 2>&1)
  echo "$report" >"$OUT/$name.report.txt"
  # Step by step against this round's idealised run (run first): where the checkpoints' time goes.
  if [[ $kind == every10 ]]; then
    "$BUILD_DIR/bin/topotrain-report" "$dir/runs/r" --skip "$skip" --compare "$OUT/ideal-$round.timings.h5" \
      >"$OUT/$name.compare.txt" 2>&1
  fi
  checkpoint=$(awk '$1 == "checkpoint" {print $3; exit}' <<<"$report")
  optimizer=$(awk '$1 == "optimizer" {printf "%s / %s", $3, $4; exit}' <<<"$report")
  beside=$(grep -o 'p50 [0-9.]* ms against [0-9.]* ms without ([^;]*' <<<"$report" | sed 's/^p50 //; s/ without (/, /')
  writes=$(grep -o 'written: [0-9.]* GiB in [0-9.]* s' "$OUT/$name.log" | awk '{printf "%s%s", sep, $5; sep=", "}')
  [[ $kind == idealised && ${5:-} != dd ]] && ideal_tps+=("$tps")
  rows+=("$label|$tps|${checkpoint:--}|$optimizer|${beside:--}|${writes:--}")
  echo "$label: $tps tok/s, checkpoint mean ${checkpoint:--} ms, optimizer mean / p50 ${optimizer} ms," \
    "beside a write ${beside:--}, writes ${writes:--} s"
  cp "$dir/runs/r/timings.h5" "$OUT/$name.timings.h5"
  rm -rf "$dir/runs"
}

for (( round = 1; round <= rounds; ++round )); do
  measure "ideal-$round" "idealised ($round)" idealised "$shm"
  measure "every10-shm-$round" "every10 into /dev/shm ($round)" every10 "$shm"
  measure "ideal-dd-$round" "idealised + dd into /dev/shm ($round)" idealised "$shm" dd
  measure "every10-disk-$round" "every10 into ${TMPDIR:-/tmp} ($round)" every10 "$disk"
done

reference=$(printf '%s\n' "${ideal_tps[@]}" | awk '{s += $1; n++} END {if (n) print s / n}')
for row in "${rows[@]}"; do
  IFS='|' read -r label tps checkpoint optimizer beside writes <<<"$row"
  share=$(awk -v t="$tps" -v r="${reference:-0}" 'BEGIN {if (r > 0) printf "%.1f%%", 100 * t / r; else print "-"}')
  tps=$(awk -v t="$tps" 'BEGIN {printf "%.1fK", t / 1000}')
  echo "| $label | $tps | $share | $checkpoint | $optimizer | $beside | $writes |" >>"$table"
done
echo
cat "$table"
