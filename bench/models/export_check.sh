#!/usr/bin/env bash
# The export check on one GPU (an H200 with transformers, torch and safetensors installed):
# moe_train trains tiny-moe for a few steps and writes a one-step moe-500m checkpoint;
# topotrain-export writes each as an fp32 Hugging Face model; transformers loads that with
# AutoModelForCausalLM.from_pretrained and computes the logits of a packed batch
# (bench/models/hf_parity.py --export), and hf_parity computes topotrain's logits of the
# checkpoint itself (its stored config and weights) on the same batch and compares them in
# fp32: max |a - b| / max |b| <= 1e-4 for the logits and the loss.
#
#   BUILD_DIR=/root/build-gpu bash bench/models/export_check.sh
#
# Builds nothing: BUILD_DIR/bin must hold moe_train, topotrain-export and hf_parity. Prints
# one PASS/FAIL row per model, also to ${OUT:-/tmp}/export_check.txt; exit status 1 when a
# model fails. EXPORT_CHECK_DEVICE=cpu trains on a CPU rank instead of GPU 0 (a check of the
# script on a machine without a GPU); EXPORT_CHECK_MODELS picks the presets (default
# "tiny-moe moe-500m").
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
: "${BUILD_DIR:?set BUILD_DIR to a topotrain build directory (its bin/ holds moe_train, topotrain-export, hf_parity)}"
bin=$BUILD_DIR/bin
for tool in moe_train topotrain-export hf_parity; do
  [[ -x $bin/$tool ]] || { echo "export_check: $bin/$tool not found; build it first (cmake --build $BUILD_DIR --target ${tool//-/_})" >&2; exit 2; }
done
source launch/env.sh
out=${OUT:-/tmp}
mkdir -p "$out"
results=$out/export_check.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

device=${EXPORT_CHECK_DEVICE:-0}
if [[ $device == cpu ]]; then devices='"cpu"' interconnect=cpu; else devices="[$device]" interconnect=pcie4; fi
printf '[topology]\nname = "export-check"\ninterconnect = "%s"\n[[roles]]\nrole = "trainer"\nranks = [0]\ndevices = %s\n' \
  "$interconnect" "$devices" > "$work/one.toml"

# check PRESET STEPS TOKEN_BUDGET: train, export, load with transformers, compare; prints the row.
check() {
  local preset=$1 steps=$2 budget=$3 log=$work/$1.log
  local stage=train
  if mpirun -np 1 "$bin/moe_train" "$work/one.toml" --set model.preset="$preset" --set train.max_steps="$steps" \
       --set train.token_budget="$budget" --set checkpoint.dir="$work" --set checkpoint.run="$preset" >"$log" 2>&1 &&
     stage=export && "$bin/topotrain-export" "$work/$preset" "$work/$preset-hf" --dtype fp32 >>"$log" 2>&1 &&
     stage=transformers && python3 bench/models/hf_parity.py "$work/cases" --export "$preset=$work/$preset-hf" >>"$log" 2>&1 &&
     stage=compare && "$bin/hf_parity" "$work/cases/$preset" --weights "$work/$preset" >"$work/$preset.row" 2>>"$log"; then
    echo "PASS $preset ($steps steps): $(cat "$work/$preset.row")"
    return 0
  fi
  echo "FAIL $preset ($steps steps) at $stage: $(cat "$work/$preset.row" 2>/dev/null)"
  tail -20 "$log" | sed 's/^/    /'
  return 1
}

status=0
{
  echo "# bench/models/export_check.sh, $(date -u +%F), device $device"
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' ||
    status=1
  for preset in ${EXPORT_CHECK_MODELS:-tiny-moe moe-500m}; do
    case $preset in
      tiny-moe) check tiny-moe 5 2048 || status=1 ;;
      *) check "$preset" 1 4096 || status=1 ;;
    esac
  done
  exit $status
} 2>&1 | tee "$results"
status=${PIPESTATUS[0]}
echo "results in $results"
exit "$status"
