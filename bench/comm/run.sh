#!/usr/bin/env bash
# Communication benchmarks on a GPU machine with 2+ GPUs: all-reduce bus bandwidth, the
# GradReducer against one raw all-reduce of the same bytes, and hidden-state link
# throughput (NCCL vs CUDA IPC vs a raw peer copy), each with NVLink/P2P and with
# NCCL_P2P_DISABLE=1 (the PCIe-like path). Results go to "$OUT/comm_bench.txt" (or
# ./comm_bench.txt).
#   BUILD_DIR=build-gpu bench/comm/run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
np=${NP:-2}
out=${OUT:-.}/comm_bench.txt
[[ -f $build/CMakeCache.txt ]] || BUILD_DIR=$build "$root/launch/build.sh" >/dev/null
cmake --build "$build" --target comm_bench -j "$(nproc --all)" >/dev/null
# toml++ unpacked into .deps (shared/gpu recipe) is a shared library the binaries need.
export LD_LIBRARY_PATH=$root/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
mpirun=(mpirun --allow-run-as-root --bind-to none -np "$np" -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE)
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$np"
  echo "## NCCL default (P2P / NVLink)"
  timeout 150 "${mpirun[@]}" "$build/bin/comm_bench" all
  echo "## NCCL_P2P_DISABLE=1"
  timeout 150 "${mpirun[@]}" -x NCCL_P2P_DISABLE=1 "$build/bin/comm_bench" all
} 2>&1 | tee "$out"
