#!/usr/bin/env bash
# Which part of the HF Qwen3Moe reference shape makes the step after a checkpoint snapshot run
# its forward until the snapshot's device-to-host copy ends. On an H200 (RESULTS.md,
# "2026-12-05") the reference shape's step 101 took +65-69 ms, all in its forward, which ended
# when the 0.11 s copy did; moe-500m's forward does not wait. One GPU, grad_accum 1,
# 16384-token micro-batches, checkpoint.every_steps = 10 with the other settings at their
# defaults, STEPS (default 45) steps, one run per variant, each changing one thing:
#   reference        bench/moe/reference_shape.py's config.json on ~4K-token documents
#   untied           tie_word_embeddings = false
#   head_dim 128     8 heads of 128, 2 KV heads (moe-500m's head size; same q/k/v widths)
#   top-2            num_experts_per_tok = 2
#   2K documents     the reference config on ~2K-token documents (moe-500m's data)
#   moe-500m         the preset on ~2K-token documents (the control: no wait), and on ~4K ones
#   eager loading    the reference with CUDA_MODULE_LOADING=EAGER
# A lead, not a finding: the reference's ~4K-token documents run cuDNN once per document window
# (attention.h), whose plan for a window size not seen before brings new kernels; under CUDA's
# lazy module loading (the default) loading a kernel may wait for the device's other work, here
# the copy. moe-500m's ~2K-token documents run FlashAttention varlen. Then the steps after a
# snapshot that meet a new window size would wait and the others not, the ~2K-token variant
# would not wait, and eager loading would not either.
# Per run, from its timings.h5 and log: the forward p50 (ms) of the steps after SKIP (default 5)
# that follow no snapshot, and the forward and checkpoint phase of each step that follows a
# snapshot taken (the log's written checkpoints: one that falls due during a write is deferred);
# topotrain-report's slowest steps beside it. The reference runs LONG_STEPS (default 150) steps,
# the others STEPS: if new window sizes are the cause, its late snapshots (by then it has met
# most sizes) leave their next step's forward as it is. The variant whose steps after a snapshot
# lose their long forward names the cause. Table in $OUT/snapshot_forward.md (default $OUT: a
# new temporary folder), logs, reports and timings beside it. SMOKE=1 runs a tiny config on one
# CPU rank, as a check of the script (no transformers needed).
#   SKIP_BUILD=1 bash bench/moe/snapshot_forward_probe.sh   (from the project root)
set -uo pipefail
# shellcheck source=bench/moe/one_gpu_setup.sh
source "$(dirname "$0")/one_gpu_setup.sh"
steps=${STEPS:-45} long_steps=${LONG_STEPS:-150} skip=${SKIP:-5} python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/snapshot-probe.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [[ ${SMOKE:-0} == 1 ]]; then
  budget=256 devices='"cpu"' preset=tiny-moe steps=25 long_steps=45
  head=32 wide='{"head_dim": 32, "num_attention_heads": 2, "num_key_value_heads": 1}'
  data_args=(--tokens 200000 --vocab 512) long=300 short=150
  # A tiny Qwen3Moe config.json with the fields model.config reads.
  "$python" - "$work/base.json" <<'PY' || exit 1
import json, sys
json.dump({"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 512, "hidden_size": 64,
           "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 4,
           "tie_word_embeddings": True, "max_position_embeddings": 4096}, open(sys.argv[1], "w"))
PY
else
  budget=16384 devices='[0]' preset=moe-500m
  head=128 wide='{"head_dim": 128, "num_attention_heads": 8, "num_key_value_heads": 2}'
  data_args=(--tokens 8000000) long=4096 short=2048
  "$python" bench/moe/reference_shape.py "$work/reference" >/dev/null || exit 1
  cp "$work/reference/config.json" "$work/base.json"
fi
build_unless_skipped probe
# shellcheck source=/dev/null
source launch/env.sh
one_rank_topology "$work/one.toml" "$devices"
"$python" bench/moe/make_dataset.py "$work/long.h5" "${data_args[@]}" --mean-len "$long" >/dev/null || exit 1
"$python" bench/moe/make_dataset.py "$work/short.h5" "${data_args[@]}" --mean-len "$short" >/dev/null || exit 1

variant() {  # NAME JSON_CHANGES: the base config.json with JSON_CHANGES' keys replaced
  "$python" - "$work/base.json" "$work/$1.json" "$2" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config.update(json.loads(sys.argv[3]))
json.dump(config, open(sys.argv[2], "w"), indent=2)
PY
}
variant reference '{}'
variant untied '{"tie_word_embeddings": false}'
variant wide "$wide"
variant top2 '{"num_experts_per_tok": 2}'

table=$OUT/snapshot_forward.md
{ printf '| variant | forward p50 ms (no snapshot before) | forward ms after a snapshot |'
  echo " checkpoint ms after a snapshot |"
  echo "|---|---|---|---|"; } >"$table"

probe() {  # NAME LABEL DATA MODEL_SETTING STEPS [NAME=VALUE...]: the last, moe_train's environment
  local name=$1 label=$2 data=$3 model=$4 run_steps=$5
  shift 5
  rm -rf "$work/runs"
  if ! timeout 400 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH -x OMP_NUM_THREADS \
       env "$@" "$BUILD_DIR/bin/moe_train" "$work/one.toml" --set "$model" --set "data.path=$work/$data.h5" \
       --set "train.token_budget=$budget" --set "train.max_steps=$run_steps" --set checkpoint.every_steps=10 \
       --set "checkpoint.dir=$work/runs" --set checkpoint.run=r >"$OUT/$name.log" 2>&1; then
    echo "| $label | failed: see $name.log | | |" >>"$table"
    return
  fi
  cp "$work/runs/r/timings.h5" "$OUT/$name.timings.h5"
  "$BUILD_DIR/bin/topotrain-report" "$work/runs/r" --skip "$skip" --slowest 6 >"$OUT/$name.report.txt" 2>&1
  "$python" - "$OUT/$name.timings.h5" "$OUT/$name.log" "$skip" "$label" >>"$table" <<'PY'
import re, statistics, sys
import h5py
sys.path.insert(0, "bench/moe")
from summarize import read_table
path, log, skip, label = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with h5py.File(path, "r") as f:
    rows, col = read_table(f, "steps")
phase = {int(r[col["step"]]): (1e3 * float(r[col["forward"]]), 1e3 * float(r[col["checkpoint"]])) for r in rows}
last = max(phase)
# The steps after the snapshots taken: a checkpoint that falls due during a write is deferred.
saved = {int(m) for m in re.findall(r"step-(\d+)\.h5 written", open(log).read())}
after = [s + 1 for s in sorted(saved) if s + 1 < last]
plain = [phase[s][0] for s in sorted(phase) if s > skip and s not in after and s < last]
print(f"| {label} | {statistics.median(plain):.1f} | {', '.join(f'{s}: {phase[s][0]:.1f}' for s in after)} | "
      f"{', '.join(f'{phase[s][1]:.1f}' for s in after)} |")
PY
}

probe reference "reference, ~$long-token documents" long "model.config=$work/reference.json" "$long_steps"
probe untied "untied" long "model.config=$work/untied.json" "$steps"
probe wide "head_dim $head" long "model.config=$work/wide.json" "$steps"
probe top2 "top-2" long "model.config=$work/top2.json" "$steps"
probe reference-short "reference, ~$short-token documents" short "model.config=$work/reference.json" "$steps"
probe preset-short "$preset, ~$short-token documents" short "model.preset=$preset" "$steps"
probe preset-long "$preset, ~$long-token documents" long "model.preset=$preset" "$steps"
probe eager "reference, CUDA_MODULE_LOADING=EAGER" long "model.config=$work/reference.json" "$steps" \
  CUDA_MODULE_LOADING=EAGER
cat "$table"
