#!/usr/bin/env bash
# A tiny DFlash target and drafter for the hf DFlash tests, trained briefly on CPU and exported:
#   dflash_pair.sh WORK        (TOPOTRAIN_BIN: the build's programs; TOPOTRAIN_PYTHON: python3)
# The README's DFlash demo in small: the demo's arithmetic chats (data/chat_demo.py, byte
# tokenizer, loss on the assistant turns), a tiny target of TARGET_FAMILY trained TARGET_STEPS steps by
# moe_train on one rank, then a two-layer drafter of block 4 on tap layers 0 and 1 trained
# DRAFTER_STEPS steps against it by dflash_train on topology/cpu-1t1d.toml. Both are exported in
# fp32 by topotrain-export. WORK gets target-hf/ and drafter-hf/ (the exported folders) and
# held-out.jsonl (chats of another seed, {"messages": [...]} a line); logs stay in WORK.
# TARGET_FAMILY: qwen3 (default: the tiny-dense preset), llama or qwen2 (tiny_config.sh's shape of
# that family: Llama with llama3 RoPE scaling, Qwen2 with its q/k/v biases).
set -euo pipefail
work=$1
bin=${TOPOTRAIN_BIN:?TOPOTRAIN_BIN must name the bin folder of a build}
python=${TOPOTRAIN_PYTHON:-python3}
target_steps=${TARGET_STEPS:-150} drafter_steps=${DRAFTER_STEPS:-150}
mpirun=(mpirun --oversubscribe --allow-run-as-root --bind-to none)

run() {  # run LOG COMMAND...: the command's output goes to WORK/LOG, shown when it fails
  local log=$work/$1
  shift
  "$@" >"$log" 2>&1 || { echo "dflash_pair.sh: failed: $*"; tail -30 "$log"; exit 1; }
}

"$python" data/chat_demo.py 1 400 >"$work/train.jsonl"
"$python" data/chat_demo.py 2 40 >"$work/held-out.jsonl"
run prepare.log "$bin/topotrain-prepare" -q "$work/train.jsonl" -o "$work/train.h5"
printf '[topology]\nname = "one"\ninterconnect = "cpu"\n[[roles]]\nrole = "trainer"\nranks = [0]\ndevices = "cpu"\n' \
  >"$work/one.toml"
common=(--set data.path="$work/train.h5" --set train.token_budget=512 --set train.schedule=steps
        --set train.epochs=1000 --set checkpoint.every_steps=0 --set checkpoint.dir="$work" --set log.every=20)
family=${TARGET_FAMILY:-qwen3}
if [[ $family == qwen3 ]]; then
  target_model=(--set model.preset=tiny-dense) drafter_model=()
else
  bash tests/hf/tiny_config.sh "$family" >"$work/target-config.json"
  # The topology's tiny-dense preset is taken back: the target's weights give its model.
  target_model=(--set model.config="$work/target-config.json") drafter_model=(--set model.preset=)
fi
run target.log timeout 300 "${mpirun[@]}" -np 1 "$bin/moe_train" "$work/one.toml" "${common[@]}" \
  "${target_model[@]}" --set train.max_steps="$target_steps" --set train.lr=5e-3 --set checkpoint.run=target
run drafter.log timeout 300 "${mpirun[@]}" -np 2 "$bin/dflash_train" topology/cpu-1t1d.toml "${common[@]}" \
  --set model.weights="$work/target" "${drafter_model[@]}" --set model.draft_layers=2 --set "model.taps=0,1" \
  --set train.max_steps="$drafter_steps" --set train.loss=kl --set checkpoint.run=drafter
run export-target.log "$bin/topotrain-export" "$work/target" "$work/target-hf" --dtype fp32
run export-drafter.log "$bin/topotrain-export" "$work/drafter" "$work/drafter-hf" --dtype fp32
