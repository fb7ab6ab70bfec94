#!/usr/bin/env bash
# dflash_export_logits.sh WORK (hf tests hf_dflash_export_logits, hf_dflash_FAMILY through
# tests/hf/dflash_family.sh): an exported DFlash drafter's logits, topotrain's against a
# draft forward written on transformers' Qwen3 modules from the exported folders alone, fp32 on
# CPU. tests/hf/dflash_pair.sh trains and exports a tiny target and a two-layer drafter of block
# 4 (taps 0 and 1); bench/dflash/drafter_logits runs topotrain's drafter through its training
# path (forward_blocks) on two held-out chats, a block anchored at every row that has a token
# after it (row 0, with no context, included); tests/hf/dflash_export_parity.py computes the same
# with transformers and compares. Bound: max |a - b| / max |b| <= 1e-4 on the taps and on the
# logits (both in fp32: only summation order differs).
set -euo pipefail
python=${TOPOTRAIN_PYTHON:?TOPOTRAIN_PYTHON must name python3 with torch and transformers}
work=${1:?WORK: a folder tests/hf/dflash_pair.sh has filled (tests/hf/dflash_family.sh runs both)}

"$python" - "$work" <<'PY'
import json, sys
work = sys.argv[1]
chats = [json.loads(line)["messages"] for line in open(f"{work}/held-out.jsonl")][:2]
tokens = []  # ChatML in the byte tokenizer: a byte is its id, <|im_start|> 257, <|im_end|> 258
for message in chats[0] + chats[1]:
    tokens += [257] + list(f"{message['role']}\n{message['content']}".encode()) + [258, ord("\n")]
json.dump({"tokens": tokens, "anchors": list(range(len(tokens) - 1))}, open(f"{work}/in.json", "w"))
PY
"$TOPOTRAIN_BIN/drafter_logits" "$work/target-hf" "$work/drafter-hf" "$work/in.json" "$work/fp32.safetensors" \
  --device cpu --dtype fp32
"$python" tests/hf/dflash_export_parity.py "$work/target-hf" "$work/drafter-hf" "$work/in.json" \
  "$work/fp32.safetensors" --device cpu
