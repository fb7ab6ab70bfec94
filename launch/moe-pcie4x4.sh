#!/usr/bin/env bash
# The full-scale moe_train runs of a 4-GPU machine: moe-500m on topology/pcie4x4.toml.
#   baseline   1 GPU (same settings), grad_accum 10 and 1
#   p2p        4 GPUs, NCCL's default transport, grad_accum 10 and 1
#   no-p2p     4 GPUs, NCCL_P2P_DISABLE=1 (a PCIe workstation without peer-to-peer), grad_accum 10 and 1
#   resume     4 GPUs: STEPS steps with a checkpoint, then --resume auto at half the token_budget
# Each run's progress lines and topotrain-report go to $OUT (default ./full-scale-moe); the
# summary (tokens/s, MFU, comm share, scaling against 1 GPU) to $OUT/summary.txt.
#   launch/moe-pcie4x4.sh             STEPS_GA10 (8), STEPS_GA1 (30), STEPS (6) set the run lengths
# MOE_TOPOLOGY=topology/cpu4.toml runs the same sequence on CPU ranks (a check of the script).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
topology=${MOE_TOPOLOGY:-topology/pcie4x4.toml}
export BUILD_DIR=${BUILD_DIR:-$root/build-gpu}
[[ -x $BUILD_DIR/bin/moe_train ]] || launch/build.sh >/dev/null
source launch/env.sh
bin=$BUILD_DIR/bin
out=${OUT:-$root/full-scale-moe}
mkdir -p "$out"
rm -f "$out"/*.log "$out"/*.report.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
np=$(grep -Eo 'ranks = \[[0-9, ]+\]' "$topology" | head -1 | tr -cd '0-9,' | tr ',' '\n' | grep -c .)
device=$(grep -Eo 'devices = ("cpu"|\[[0-9]+)' "$topology" | head -1 | grep -Eo '"cpu"|[0-9]+$')
[[ $device == '"cpu"' ]] || device="[$device]"
printf '[topology]\nname = "one"\ninterconnect = "pcie4"\n[[roles]]\nrole = "trainer"\nranks = [0]\ndevices = %s\n' \
  "$device" > "$work/one.toml"
# The topology's [model] and [train] tables apply to the baseline too.
sed -n '/^\[model\]/,$p' "$topology" >> "$work/one.toml"

run() {  # run NAME NP TOPOLOGY [moe_train args...]: progress lines and the report to $out/NAME.*
  local name=$1 n=$2 topo=$3
  shift 3
  echo "## $name: mpirun -np $n moe_train $topo $*" | tee -a "$out/summary.txt"
  timeout "${RUN_TIMEOUT_S:-600}" mpirun --allow-run-as-root --bind-to none --oversubscribe -np "$n" \
    -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x NCCL_P2P_DISABLE "$bin/moe_train" "$topo" \
    --set checkpoint.dir="$work" --set checkpoint.run="$name" --set log.every=1 "$@" >> "$out/$name.log" 2>&1 ||
    { tail -20 "$out/$name.log"; return 1; }
  "$bin/topotrain-report" "$work/$name" --skip 2 > "$out/$name.report.txt" || true
  grep -E "\[rank 0 trainer\] step" "$out/$name.log" | tail -1 | tee -a "$out/summary.txt"
  grep -E "^bottleneck" "$out/$name.report.txt" | tee -a "$out/summary.txt" || true
}

: > "$out/summary.txt"
for ga in 10 1; do
  steps=$([[ $ga == 10 ]] && echo "${STEPS_GA10:-8}" || echo "${STEPS_GA1:-30}")
  common=(--set train.grad_accum=$ga --set train.max_steps="$steps" --set checkpoint.every_steps=-1)
  NCCL_P2P_DISABLE=0 run "baseline-ga$ga" 1 "$work/one.toml" "${common[@]}"
  NCCL_P2P_DISABLE=0 run "p2p-ga$ga" "$np" "$topology" "${common[@]}"
  NCCL_P2P_DISABLE=1 run "no-p2p-ga$ga" "$np" "$topology" "${common[@]}"
done
budget=$(grep -Eo 'token_budget = [0-9]+' "$topology" | grep -Eo '[0-9]+$')
steps=${STEPS:-6}
NCCL_P2P_DISABLE=0 run resume "$np" "$topology" --set train.max_steps=$((steps / 2)) --set checkpoint.every_steps=$((steps / 2))
NCCL_P2P_DISABLE=0 run resume "$np" "$topology" --set train.max_steps="$steps" --set checkpoint.every_steps=-1 \
  --set train.token_budget=$((budget / 2)) --resume auto
grep -E "resumed from" "$out/resume.log" | tee -a "$out/summary.txt"
