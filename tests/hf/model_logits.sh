#!/usr/bin/env bash
# topotrain's model families against transformers (ctest hf_logits; bench/models/run.sh runs it
# on a GPU). hf_parity.py builds five tiny models with random weights in transformers (Qwen3
# dense with tied embeddings, Qwen3-MoE top-2 of 8 experts and with every expert chosen, Llama
# 3.x with llama3 RoPE scaling, Qwen2 with random q/k/v biases), writes each
# with save_pretrained and writes HF's fp32 logits, loss and gradients of a packed batch of
# documents of four lengths, each run through HF alone. hf_parity loads each folder as topotrain
# loads Hugging Face weights and compares, in fp32 on the CPU:
#   logits, loss and MoE aux loss: max |topotrain - HF| / max |HF| <= 1e-4
#   every weight's gradient:       ||topotrain - HF|| / ||HF||    <= 1e-4
# (on a GPU also bf16, with its own bounds: bench/models/hf_parity.cpp).
#
#   TOPOTRAIN_PYTHON=... TOPOTRAIN_BIN=build/bin tests/hf/model_logits.sh
set -euo pipefail
: "${TOPOTRAIN_PYTHON:?the python3 with torch and transformers}" "${TOPOTRAIN_BIN:?the bin/ folder of a build (hf_parity)}"
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$TOPOTRAIN_PYTHON" tests/hf/hf_parity.py "$work"
status=0
for case in dense moe moe_all llama qwen2; do "$TOPOTRAIN_BIN/hf_parity" "$work/$case" || status=1; done
exit $status
