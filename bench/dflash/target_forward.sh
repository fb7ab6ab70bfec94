#!/usr/bin/env bash
# #49's target-forward goal on one GPU: topotrain's frozen DFlash target forward (model_bench
# with MODEL_BENCH_FROZEN_TAPS: bf16 weights, no gradients, the taps' hidden states, no LM head)
# beside transformers' forward of the same shape (target_forward_reference.py: Qwen3Model,
# output_hidden_states, SDPA one document at a time), one after the other in one sitting, the
# same tokens per batch and document lengths drawn alike (uniform in [MEAN/2, 3 MEAN/2]).
# Prints both rates and their ratio (the goal: >= 1.2).
#   PRESET (qwen3-8b; or qwen3-0.6b, or an HF config.json such as bench/dflash/llama-3.1-8b.json,
#   whose family's base model transformers builds) TOKENS (16384) MEAN_LEN (4096) TAPS (1,9,17,25,33;
#   1,8,15,22,29 for Llama-3.1-8B's 32 layers, DFlash's default five)
#   bash bench/dflash/target_forward.sh          (from the project root; builds into BUILD_DIR)
set -uo pipefail
# shellcheck source=bench/moe/one_gpu_setup.sh
source "$(dirname "$0")/../moe/one_gpu_setup.sh"
build_unless_skipped target_forward
# shellcheck source=/dev/null
source launch/env.sh
preset=${PRESET:-qwen3-8b} tokens=${TOKENS:-16384} mean=${MEAN_LEN:-4096}
ours=$(MODEL_BENCH_FROZEN_TAPS=${TAPS:-1,9,17,25,33} "$BUILD_DIR/bin/model_bench" "$preset" "$tokens" \
  "$((mean / 2))-$((3 * mean / 2))" 8 | tail -1) || { echo "model_bench failed: $ours"; exit 1; }
echo "topotrain: $ours"
if [[ $preset == *.json ]]; then model=(--config "$preset"); else model=(--preset "$preset"); fi
theirs=$(python3 bench/dflash/target_forward_reference.py "${model[@]}" --tokens "$tokens" --mean-len "$mean" \
  --batches 8 | tail -1) || { echo "target_forward_reference.py failed: $theirs"; exit 1; }
echo "transformers: $theirs"
python3 - "$ours" "$theirs" "$preset" <<'PY' | tee -a "$OUT/target_forward.txt"
import json, re, sys
ours = float(re.search(r"([0-9.]+) tokens/s", sys.argv[1]).group(1))
theirs = json.loads(sys.argv[2])["tokens_per_s"]
print(f"target forward ({sys.argv[3]}): topotrain {ours:.0f} tok/s, transformers {theirs:.0f} tok/s, ratio {ours / theirs:.2f}")
PY
