#!/usr/bin/env bash
# dflash_speculate.sh WORK (hf tests hf_dflash_speculate, hf_dflash_FAMILY through
# tests/hf/dflash_family.sh): topotrain-speculate's greedy speculative decoding against one
# written on transformers (tests/hf/dflash_speculate.py: its bound is equality of every
# response token and every verification's acceptance length), fp32 on CPU, with the tiny
# target and drafter of tests/hf/dflash_pair.sh.
set -euo pipefail
python=${TOPOTRAIN_PYTHON:?TOPOTRAIN_PYTHON must name python3 with torch and transformers}
work=${1:?WORK: a folder tests/hf/dflash_pair.sh has filled (tests/hf/dflash_family.sh runs both)}
"$python" tests/hf/dflash_speculate.py "$work"
