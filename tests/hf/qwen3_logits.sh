#!/usr/bin/env bash
# topotrain's Qwen3 and Qwen3-MoE against transformers (ctest hf_logits_qwen3; bench/models/run.sh
# runs it on a GPU). hf_parity.py builds three tiny models with random weights in transformers
# (dense with tied embeddings, MoE top-2 of 8 experts, MoE with every expert chosen), writes each
# with save_pretrained and writes HF's fp32 logits, loss and gradients of a packed batch of
# documents of four lengths, each run through HF alone. hf_parity loads each folder as topotrain
# loads Hugging Face weights and compares, in fp32 on the CPU:
#   logits, loss and MoE aux loss: max |topotrain - HF| / max |HF| <= 1e-4
#   every weight's gradient:       ||topotrain - HF|| / ||HF||    <= 1e-4
# (on a GPU also bf16, with its own bounds: bench/models/hf_parity.cpp).
#
#   TOPOTRAIN_PYTHON=... TOPOTRAIN_BIN=build/bin tests/hf/qwen3_logits.sh
set -euo pipefail
: "${TOPOTRAIN_PYTHON:?the python3 with torch and transformers}" "${TOPOTRAIN_BIN:?the bin/ folder of a build (hf_parity)}"
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$TOPOTRAIN_PYTHON" tests/hf/hf_parity.py "$work"
status=0
for case in dense moe moe_all; do "$TOPOTRAIN_BIN/hf_parity" "$work/$case" || status=1; done
exit $status
