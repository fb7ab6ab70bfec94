#!/usr/bin/env bash
# hf test hf_dflash_speculate: topotrain-speculate's greedy speculative decoding against one
# written on transformers (tests/hf/dflash_speculate.py: its bound is equality of every
# response token and every verification's acceptance length), fp32 on CPU, with the tiny
# target and drafter of tests/hf/dflash_pair.sh.
set -euo pipefail
python=${TOPOTRAIN_PYTHON:?TOPOTRAIN_PYTHON must name python3 with torch and transformers}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash tests/hf/dflash_pair.sh "$work"
"$python" tests/hf/dflash_speculate.py "$work"
