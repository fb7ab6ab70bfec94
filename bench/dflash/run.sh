#!/usr/bin/env bash
# DFlash drafter alone on one GPU (an H200): the SDPA-vs-math attention parity test, then
# forward+backward tokens/s and MFU of a 5-layer drafter of qwen3-8b shapes (hidden 4096)
# at a 16K-token micro-batch with up to 512 anchors per document, for documents of 16K,
# 4K and 2K tokens, with each attention path (sdpa with bucketed shapes, sdpa-exact, math).
# Results go to stdout and, if set, "$OUT".
#   bench/dflash/run.sh            (from the project root; builds into build-gpu)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export BUILD_DIR=${BUILD_DIR:-$root/build-gpu} BUILD_TYPE=${BUILD_TYPE:-Release}
source launch/env.sh
jobs=${JOBS:-$(nproc --all)}
JOBS=$jobs launch/build.sh -DTOPOTRAIN_BUILD_TESTS=ON >/dev/null
bin=$BUILD_DIR/bin
if [[ ! -x $bin/test_dflash_gpu ]]; then  # a build dir configured without tests
  cmake -S "$root" -B "$BUILD_DIR" -DTOPOTRAIN_BUILD_TESTS=ON >/dev/null
  cmake --build "$BUILD_DIR" -j "$jobs" --target test_dflash_gpu dflash_bench >/dev/null
fi
# One process: let it use the cores for building the random qwen3-8b-sized drafter.
export OMP_NUM_THREADS=8
results=${OUT:-$(mktemp -d)}
mkdir -p "$results"
{
  echo "# bench/dflash/run.sh on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)"
  status=0
  "$bin/test_dflash_gpu" || status=1
  for doc_len in 16384 4096 2048; do "$bin/dflash_bench" 16384 "$doc_len" 512 10 sdpa,sdpa-exact,math; done
  exit $status
} 2>&1 | tee "$results/dflash.txt"
