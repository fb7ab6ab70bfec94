#!/usr/bin/env bash
# The export check on one GPU (an H200 with transformers, torch and safetensors installed):
# moe_train trains tiny-moe for a few steps and writes a one-step moe-500m checkpoint;
# topotrain-export writes each as an fp32 Hugging Face model; transformers loads that with
# AutoModelForCausalLM.from_pretrained and computes the logits of a packed batch
# (tests/hf/hf_parity.py --export), and hf_parity computes topotrain's logits of the
# checkpoint itself (its stored config and weights) on the same batch and compares them in
# fp32: max |a - b| / max |b| <= 1e-4 for the logits and the loss.
# Then a chat model as a user of transformers meets it ("generate", tests/hf/export_generate.sh,
# which ctest runs on CPU as hf_generate_export): the DFlash demo's arithmetic chats prepared with
# a Qwen3 tokenizer (TOKENIZER_DIR, default ../shared/data/qwen3-tokenizer beside the repository;
# skipped with a line when absent), a qwen3-0.6b shape trained GENERATE_STEPS (100) steps of 16K
# tokens from random weights and exported with its tokenizer; transformers loads AutoTokenizer
# (as quietly as from its source folder) and the model from the folder alone, generates on a chat
# prompt of the tokenizer's own template, which must stop at <|im_end|>, and greedily on 16 chat
# prompts, which must equal topotrain's greedy continuation (greedy_continuation) token for token,
# fp32 on both sides; topotrain-speculate on the folder must stop where generate stops.
#
#   BUILD_DIR=/root/build-gpu bash bench/models/export_check.sh
#
# Builds nothing: BUILD_DIR/bin must hold moe_train, dflash_train, topotrain-export,
# topotrain-prepare, topotrain-speculate, hf_parity and greedy_continuation; TOPOTRAIN_PYTHON
# (default python3) has torch and transformers. Prints one PASS/FAIL row per check, also to
# ${OUT:-/tmp}/export_check.txt; exit status 1 when a check fails. EXPORT_CHECK_DEVICE=cpu
# trains on a CPU rank instead of GPU 0 (a check of the script on a machine without a GPU;
# "generate" then uses tiny-dense and data/make_bpe_tokenizer.py's byte-level tokenizer, as the
# ctest does); EXPORT_CHECK_MODELS picks the checks (default "tiny-moe moe-500m generate").
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
: "${BUILD_DIR:?set BUILD_DIR to a topotrain build directory (its bin/ holds moe_train, topotrain-export, hf_parity)}"
bin=$BUILD_DIR/bin
for tool in moe_train dflash_train topotrain-export topotrain-prepare topotrain-speculate hf_parity greedy_continuation; do
  [[ -x $bin/$tool ]] || { echo "export_check: $bin/$tool not found; build it first (cmake --build $BUILD_DIR --target ${tool//-/_})" >&2; exit 2; }
done
source launch/env.sh
python=${TOPOTRAIN_PYTHON:-python3}
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
     stage=transformers && "$python" tests/hf/hf_parity.py "$work/cases" --export "$preset=$work/$preset-hf" >>"$log" 2>&1 &&
     stage=compare && "$bin/hf_parity" "$work/cases/$preset" --weights "$work/$preset" >"$work/$preset.row" 2>>"$log"; then
    echo "PASS $preset ($steps steps): $(cat "$work/$preset.row")"
    return 0
  fi
  echo "FAIL $preset ($steps steps) at $stage: $(cat "$work/$preset.row" 2>/dev/null)"
  tail -20 "$log" | sed 's/^/    /'
  return 1
}

# generate: tests/hf/export_generate.sh (chat data with a Hugging Face tokenizer, trained, exported,
# generated from; see the top) on this device.
generate_check() {
  local log=$work/generate.log
  local -a sizes=(GENERATE_DEVICE=cpu)
  if [[ $device != cpu ]]; then
    local tokenizer=${TOKENIZER_DIR:-$root/../shared/data/qwen3-tokenizer}
    if [[ ! -f $tokenizer/tokenizer.json ]]; then
      echo "SKIP generate: no tokenizer.json in $tokenizer (TOKENIZER_DIR names a Qwen3 tokenizer's folder)"
      return 0
    fi
    sizes=(GENERATE_DEVICE="$device" TOKENIZER_DIR="$tokenizer" GENERATE_PRESET=qwen3-0.6b
           GENERATE_STEPS="${GENERATE_STEPS:-100}" GENERATE_BUDGET=16384 GENERATE_LR=1e-3 GENERATE_CONVERSATIONS=6000)
  fi
  if env "${sizes[@]}" TOPOTRAIN_PYTHON="$python" TOPOTRAIN_BIN="$bin" bash tests/hf/export_generate.sh >"$log" 2>&1; then
    echo "PASS generate (${sizes[*]})"
    sed 's/^/    /' "$log"
    return 0
  fi
  echo "FAIL generate (${sizes[*]})"
  tail -40 "$log" | sed 's/^/    /'
  return 1
}

status=0
{
  echo "# bench/models/export_check.sh, $(date -u +%F), device $device"
  "$python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' ||
    status=1
  for preset in ${EXPORT_CHECK_MODELS:-tiny-moe moe-500m generate}; do
    case $preset in
      tiny-moe) check tiny-moe 5 2048 || status=1 ;;
      generate) generate_check || status=1 ;;
      *) check "$preset" 1 4096 || status=1 ;;
    esac
  done
  exit $status
} 2>&1 | tee "$results"
status=${PIPESTATUS[0]}
echo "results in $results"
exit "$status"
