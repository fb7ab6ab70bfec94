#!/usr/bin/env bash
# dflash_family.sh FAMILY CHECK...: a tiny target of FAMILY (qwen3, llama or qwen2) and a
# DFlash drafter trained against it and exported once by tests/hf/dflash_pair.sh, then each
# CHECK on that pair: export_logits (tests/hf/dflash_export_logits.sh: the drafter's exported
# logits against a forward written on transformers) and speculate (tests/hf/dflash_speculate.sh:
# speculative decoding against one written on transformers), each with its own bound.
# TOPOTRAIN_BIN and TOPOTRAIN_PYTHON as those scripts take them.
set -euo pipefail
family=${1:?FAMILY: qwen3, llama or qwen2}
shift
(($# > 0)) || { echo "dflash_family.sh: name a CHECK (export_logits, speculate)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
TARGET_FAMILY=$family bash tests/hf/dflash_pair.sh "$work"
for check in "$@"; do
  case $check in
    export_logits | speculate) bash "tests/hf/dflash_$check.sh" "$work" ;;
    *) echo "dflash_family.sh: unknown CHECK '$check' (export_logits, speculate)" >&2; exit 2 ;;
  esac
done
