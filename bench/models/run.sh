#!/usr/bin/env bash
# Model checks and throughput on one GPU (an H200): HF parity (fp32 and bf16 logits and
# gradients against transformers), then forward+backward tokens/s and MFU at a 16K-token
# micro-batch for moe-500m and qwen3-0.6b (documents of 2048 tokens with the model's choice
# and with FlashAttention-2 forced, then of spread lengths). Results go to stdout and, if set,
# "$OUT".
# PROFILE=1 also profiles one step of each preset and appends the head of each summary
# (GPU busy share, kernels by time; PROFILE_LINES lines, default 60) to the results.
#   bench/models/run.sh            (from the project root; builds into build-gpu)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export BUILD_DIR=${BUILD_DIR:-$root/build-gpu} BUILD_TYPE=${BUILD_TYPE:-Release}
source launch/env.sh
cmake_args=()
[[ -f $BUILD_DIR/CMakeCache.txt ]] || cmake_args=(-DTOPOTRAIN_BUILD_TESTS=OFF)
JOBS=${JOBS:-$(nproc --all)} launch/build.sh "${cmake_args[@]}" >/dev/null
bin=$BUILD_DIR/bin
results=${OUT:-$(mktemp -d)}
mkdir -p "$results"
log=$results/models.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
  echo "# bench/models/run.sh on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)"
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  status=0
  TOPOTRAIN_PYTHON=python3 TOPOTRAIN_BIN=$bin bash tests/hf/model_logits.sh || status=1
  # Documents of one length (the packed batch is cuDNN's grid as it is), the same with
  # FlashAttention-2 varlen forced, and documents of spread lengths (flash varlen).
  for preset in moe-500m qwen3-0.6b; do
    "$bin/model_bench" "$preset" 16384 2048 10
    MODEL_BENCH_ATTENTION=flash "$bin/model_bench" "$preset" 16384 2048 10 | tail -1
    "$bin/model_bench" "$preset" 16384 300-3000 10 | tail -1
  done
  if [[ ${PROFILE:-0} == 1 ]]; then
    for preset in moe-500m qwen3-0.6b; do
      mkdir -p "$work/profile-$preset"
      "$bin/model_bench" "$preset" 16384 2048 3 "$work/profile-$preset" >/dev/null
      echo "## profile of one $preset step"
      head -${PROFILE_LINES:-60} "$work/profile-$preset/profile-step1-rank0.txt" | cut -c1-200
    done
  fi
  exit $status
} 2>&1 | tee "$log"
