#!/usr/bin/env bash
# The full-scale dflash_train runs of an 8-GPU machine: topology/7t1d.toml (seven qwen3-8b-
# shaped targets, one 5-layer drafter).
#   pipeline   STEPS (40) drafter steps: per-stage rates, queue depths, drafter MFU, link
#              overhead and the report's named bottleneck
#   oom        an injected out-of-memory on target rank 3 at its batch 4 (TOPOTRAIN_FAULT_OOM),
#              then the resume command it prints (half the token_budget, --resume auto)
# Logs and reports go to $OUT (default ./full-scale-dflash), the summary to $OUT/summary.txt.
# DFLASH_TOPOLOGY=topology/cpu-7t1d.toml runs the same sequence on CPU ranks (a check of the script).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
topology=${DFLASH_TOPOLOGY:-topology/7t1d.toml}
export BUILD_DIR=${BUILD_DIR:-$root/build-gpu}
[[ -x $BUILD_DIR/bin/dflash_train ]] || launch/build.sh >/dev/null
source launch/env.sh
bin=$BUILD_DIR/bin
out=${OUT:-$root/full-scale-dflash}
mkdir -p "$out"
rm -f "$out"/*.log "$out"/*.report.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --allow-run-as-root --bind-to none --oversubscribe -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE)
common=(--set checkpoint.dir="$work" --set log.every=5)
: > "$out/summary.txt"

echo "## pipeline: mpirun -np 8 dflash_train $topology --set train.max_steps=${STEPS:-40}" | tee -a "$out/summary.txt"
timeout "${RUN_TIMEOUT_S:-900}" "${mpirun[@]}" -np 8 "$bin/dflash_train" "$topology" "${common[@]}" \
  --set checkpoint.run=pipeline --set train.max_steps="${STEPS:-40}" --set checkpoint.every_steps=-1 \
  > "$out/pipeline.log" 2>&1 || { tail -20 "$out/pipeline.log"; exit 1; }
grep -E "\[rank [0-9]+ (target|drafter)\] (step|target stream|drafter done)" "$out/pipeline.log" | tee -a "$out/summary.txt"
"$bin/topotrain-report" "$work/pipeline" --skip 3 | tee "$out/pipeline.report.txt" | grep -E "^role|^bottleneck" |
  tee -a "$out/summary.txt"

echo "## oom: TOPOTRAIN_FAULT_OOM=3:4, then the printed resume command" | tee -a "$out/summary.txt"
steps=${OOM_STEPS:-12}
if TOPOTRAIN_FAULT_OOM=3:4 timeout "${RUN_TIMEOUT_S:-900}" "${mpirun[@]}" -x TOPOTRAIN_FAULT_OOM -np 8 "$bin/dflash_train" \
  "$topology" "${common[@]}" --set checkpoint.run=oom --set train.max_steps="$steps" --set checkpoint.every_steps=2 \
  > "$out/oom.log" 2>&1; then
  echo "expected exit 3 from the injected out-of-memory" | tee -a "$out/summary.txt"
  exit 1
fi
command=$(grep -Eo "mpirun -np 8 dflash_train .*--resume auto" "$out/oom.log")
echo "printed: $command" | tee -a "$out/summary.txt"
command=${command#mpirun -np 8 dflash_train }
eval "timeout ${RUN_TIMEOUT_S:-900} ${mpirun[*]} -np 8 $bin/dflash_train $command" >> "$out/oom.log" 2>&1 ||
  { tail -20 "$out/oom.log"; exit 1; }
grep -E "resumed from|drafter done" "$out/oom.log" | tee -a "$out/summary.txt"
