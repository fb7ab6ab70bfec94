#!/usr/bin/env bash
# A trained DFlash drafter, exported, checked against an independent implementation of the
# exported format and measured by real speculative decoding, on one GPU (an H200 or H100) in
# one sitting of about 8 minutes, the build included:
#   1. data     the DFlash demo's synthetic chat conversations (data/chat_demo.py: arithmetic;
#               ChatML, byte tokenizer), prepared by topotrain-prepare with the loss mask on the
#               assistant turns: a training file and a held-out file
#   2. target   a qwen3-0.6b-shaped model from random weights (nothing can be downloaded),
#               trained TARGET_STEPS steps by moe_train, exported by topotrain-export (fp32)
#   3. drafter  dflash_train against that checkpoint for DRAFTER_STEPS steps (5 layers, block
#               16), target and drafter ranks both on GPU 0 (1t1d), KL loss (the drafter learns
#               the target's own choices, which greedy speculation verifies), evaluated after
#               its last step on the held-out file, with train.eval_speculate = 8 (speculative
#               decoding inside the trainer), exported by topotrain-export
#   4. parity   drafter_logits (topotrain's drafter through the training path, fp32 and bf16)
#               and tests/hf/dflash_export_parity.py (transformers' Qwen3 target, the draft
#               forward written again on transformers' Qwen3 modules from the exported
#               folders) on one held-out conversation: taps and logits within its bounds
#   5. decode   topotrain-speculate on 64 held-out prompts (the text before each assistant
#               turn), bf16: tau, target forwards per token and tokens/s against plain greedy
#               decoding, and the prompts whose speculative response differs from the greedy
#               one (bf16 ties may make them differ: counted, not failed)
# $OUT gets speculate.md (the summary), speculate.log (every command's output),
# speculate.json (topotrain-speculate --json) and speculate-build.log. Exit status 1 when a
# step fails or parity is out of bounds.
#
#   BUILD_DIR=/root/build-gpu bash bench/dflash/speculate.sh     (from anywhere; builds first
#                                                                 unless SKIP_BUILD=1)
#   SMOKE=1 bash bench/dflash/speculate.sh    the same steps in half a minute on CPU ranks
#       with tiny-dense shapes, a two-layer drafter of block 4 (taps 0,1) and 8 prompts, fp32;
#       builds nothing (BUILD_DIR, default build/, must hold the tools); the parity check
#       (tests/hf/dflash_export_parity.py) is skipped where python3 cannot import transformers,
#       and says so; any lossless mismatch fails (fp32).
# TARGET_STEPS, TARGET_LR, DRAFTER_STEPS, PROMPTS and MAX_NEW_TOKENS override the sizes;
# KEEP_WORK=1 keeps the scratch folder (data, runs, exported folders) and names it.
set -uo pipefail
smoke=${SMOKE:-0}
if [[ $smoke == 1 ]]; then
  here=$(cd "$(dirname "$0")/../.." && pwd)
  export BUILD_DIR=${BUILD_DIR:-$here/build} SKIP_BUILD=${SKIP_BUILD:-1}
fi
source "$(dirname "$0")/../moe/one_gpu_setup.sh"  # cd root; BUILD_DIR, OUT, build_unless_skipped
build_unless_skipped speculate
source launch/env.sh
bin=$BUILD_DIR/bin
for tool in topotrain-prepare moe_train dflash_train topotrain-export drafter_logits topotrain-speculate; do
  [[ -x $bin/$tool ]] || { echo "speculate.sh: $bin/$tool not found; build it first" >&2; exit 2; }
done
work=$(mktemp -d)
trap '[[ ${KEEP_WORK:-0} == 1 ]] || rm -rf "$work"' EXIT
log=$OUT/speculate.log summary=$OUT/speculate.md
: >"$log"

if [[ $smoke == 1 ]]; then
  preset=tiny-dense device=cpu devices='"cpu"' interconnect=cpu link=mpi dtype=fp32
  target_steps=${TARGET_STEPS:-80} drafter_steps=${DRAFTER_STEPS:-30} prompts=${PROMPTS:-8}
  max_new=${MAX_NEW_TOKENS:-32} budget=512 conversations=400 target_lr=${TARGET_LR:-5e-3}
  drafter_shape=(--set model.draft_layers=2 --set model.block_size=4 --set "model.taps=0,1" --set train.anchors=16)
else
  preset=qwen3-0.6b device=cuda devices='[0]' interconnect=nvlink link=auto dtype=bf16
  target_steps=${TARGET_STEPS:-100} drafter_steps=${DRAFTER_STEPS:-150} prompts=${PROMPTS:-64}
  max_new=${MAX_NEW_TOKENS:-96} budget=16384 conversations=6000 target_lr=${TARGET_LR:-1e-3}
  # 5 draft layers, block 16, taps spread over the target's layers; 32 anchors per conversation
  # of ~65 assistant tokens (resampled every step) keep a step near the target's forward
  drafter_shape=(--set train.anchors=32)
fi
mpirun=(mpirun --oversubscribe --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -x OMP_NUM_THREADS
  -x NCCL_NVLS_ENABLE)
failed=""

step() {  # step NAME COMMAND...: runs it into the log; a failure is remembered and its tail printed
  local name=$1 start=$SECONDS
  shift
  echo "## $name: $*" >>"$log"
  if "$@" >>"$log" 2>&1; then
    echo "$name: ok ($((SECONDS - start)) s)"
    return 0
  fi
  echo "$name: FAILED ($((SECONDS - start)) s); the log's tail:"
  tail -25 "$log" | sed 's/^/    /'
  failed+=" $name"
  return 1
}

# The DFlash demo's conversations (data/chat_demo.py: answers that follow from their
# questions, so that a target trained briefly has something to get right and a drafter
# something to guess), a training file and a held-out one of another seed; in.json is two
# held-out conversations in the byte tokenizer's ids (a byte is its id; <|im_start|> 257,
# <|im_end|> 258) with anchors across them, the first row and the last that has a token after
# it included.
make_data() {
  python3 data/chat_demo.py 1 "$conversations" >"$work/train.jsonl" &&
    python3 data/chat_demo.py 2 "$((conversations / 20 > 40 ? conversations / 20 : 40))" >"$work/held-out.jsonl" &&
    python3 - "$work" <<'EOF' &&
import json, sys
work = sys.argv[1]
conversations = [json.loads(line)["messages"] for line in open(f"{work}/held-out.jsonl")][:2]
tokens = []
for m in conversations[0] + conversations[1]:
    tokens += [257] + list(f"{m['role']}\n{m['content']}".encode()) + [258] + list(b"\n")
rows = len(tokens) - 1
anchors = sorted({0, rows - 1} | {rows * k // 8 for k in range(1, 8)})
json.dump({"tokens": tokens, "anchors": anchors}, open(f"{work}/in.json", "w"))
EOF
  "$bin/topotrain-prepare" "$work/train.jsonl" -o "$work/train.h5" -q &&
    "$bin/topotrain-prepare" "$work/held-out.jsonl" -o "$work/held-out.h5" -q
}

topology() {  # topology FILE ROLE=RANK...: every rank on the one device (GPU 0, or the CPU)
  local file=$1 role
  shift
  printf '[topology]\nname = "speculate"\ninterconnect = "%s"\n' "$interconnect" >"$file"
  for role in "$@"; do
    printf '[[roles]]\nrole = "%s"\nranks = [%s]\ndevices = %s\n' "${role%=*}" "${role#*=}" "$devices" >>"$file"
  done
  if [[ $# -gt 1 ]]; then printf '[links]\nhidden_states = "%s"\nqueue_depth = 8\n' "$link" >>"$file"; fi
}

train_target() {
  topology "$work/one.toml" trainer=0
  timeout 600 "${mpirun[@]}" -np 1 "$bin/moe_train" "$work/one.toml" --set model.preset="$preset" \
    --set data.path="$work/train.h5" --set train.token_budget="$budget" --set train.max_steps="$target_steps" \
    --set train.schedule=steps --set train.epochs=1000 --set train.lr="$target_lr" --set log.every=20 \
    --set checkpoint.every_steps=0 --set checkpoint.dir="$work" --set checkpoint.run=target &&
    "$bin/topotrain-export" "$work/target" "$work/target-hf" --dtype fp32
}

train_drafter() {
  topology "$work/1t1d.toml" target=0 drafter=1
  timeout 600 "${mpirun[@]}" -np 2 "$bin/dflash_train" "$work/1t1d.toml" --set model.weights="$work/target" \
    --set data.path="$work/train.h5" --set train.token_budget="$budget" --set train.max_steps="$drafter_steps" \
    --set train.schedule=steps --set train.epochs=1000 --set train.lr=1e-3 --set train.loss=kl --set log.every=20 \
    --set checkpoint.every_steps=0 --set checkpoint.dir="$work" --set checkpoint.run=drafter \
    --set data.eval_path="$work/held-out.h5" --set train.eval_speculate=8 "${drafter_shape[@]}" &&
    "$bin/topotrain-export" "$work/drafter" "$work/drafter-hf" --dtype fp32
}

logits() {  # fp32 everywhere, bf16 too on a GPU
  local precision
  for precision in fp32 $([[ $device == cuda ]] && echo bf16); do
    "$bin/drafter_logits" "$work/target-hf" "$work/drafter-hf" "$work/in.json" "$work/$precision.safetensors" \
      --device "$device" --dtype "$precision" || return 1
  done
}

parity() {
  local bf16=()
  [[ $device == cuda ]] && bf16=(--bf16 "$work/bf16.safetensors")
  python3 tests/hf/dflash_export_parity.py "$work/target-hf" "$work/drafter-hf" "$work/in.json" \
    "$work/fp32.safetensors" "${bf16[@]}" | tee "$work/parity.txt"
}

speculate() {
  "$bin/topotrain-speculate" --target "$work/target-hf" --drafter "$work/drafter-hf" --prompts "$work/held-out.h5" \
    --num-prompts "$prompts" --max-new-tokens "$max_new" --device "$device" --dtype "$dtype" \
    --json "$OUT/speculate.json" | tee "$work/speculate.txt"
}

{
  echo "# bench/dflash/speculate.sh$([[ $smoke == 1 ]] && echo " (SMOKE=1)"), $(date -u +%F)"
  echo
  if [[ $device == cuda ]]; then
    echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  else
    echo "device: CPU ranks ($(nproc --all) cores)"
  fi
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' \
    2>/dev/null || echo "python3 cannot import torch and transformers here"
  echo "target: model preset $preset from random weights (nothing is downloaded), trained $target_steps steps of" \
    "$budget tokens on synthetic chat data; drafter: $drafter_steps steps of dflash_train (KL loss)"
  echo
  echo '```'
  step data make_data && step target train_target && step drafter train_drafter
  [[ -z $failed ]] && step drafter_logits logits
  if [[ -z $failed ]]; then
    if python3 -c 'import torch, transformers, safetensors' 2>/dev/null; then
      step export_parity parity
    else
      python3 -m py_compile tests/hf/dflash_export_parity.py && echo "export_parity: SKIPPED: python3 cannot import" \
        "torch, transformers and safetensors here (the script compiles)"
    fi
  fi
  [[ -z $failed ]] && step speculate speculate
  echo '```'
  printf '\n## Training (last progress lines)\n\n```\n'
  grep -E "\[rank 0 trainer\] step|\[rank 1 drafter\] step" "$log" | sed 's/^[0-9-]* [0-9:]* //' |
    awk '/trainer/ {t = $0} /drafter/ {d = $0} END {print t; print d}'
  grep -E "\[rank 1 drafter\] held-out" "$log" | sed 's/^[0-9-]* [0-9:]* //'
  echo '```'
  if [[ -f $work/parity.txt ]]; then
    printf '\n## Parity (dflash_export_parity.py)\n\n```\n'; cat "$work/parity.txt"; echo '```'
  fi
  if [[ -f $work/speculate.txt ]]; then
    printf '\n## Speculative decoding (topotrain-speculate)\n\n```\n'; cat "$work/speculate.txt"; echo '```'
    mismatched=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["lossless"]["mismatched_prompts"])' \
      "$OUT/speculate.json")
    echo
    echo "lossless mismatches: $mismatched of $prompts prompts$([[ $dtype == bf16 ]] && echo " (bf16: ties may differ)")"
    [[ $dtype == fp32 && $mismatched != 0 ]] && failed+=" lossless"
  fi
  echo
  if [[ -z $failed ]]; then echo "PASS"; else echo "FAIL:$failed"; fi
  [[ -z $failed ]]
} 2>&1 | tee "$summary"
status=${PIPESTATUS[0]}
echo "results in $OUT"
[[ ${KEEP_WORK:-0} == 1 ]] && echo "scratch folder kept: $work"
exit "$status"
