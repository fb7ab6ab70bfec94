#!/usr/bin/env bash
# Builds topotrain and runs the whole test suite (GPU tests too where a GPU is present).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/launch/build.sh"
source "$root/launch/env.sh"
labels=()
if ! nvidia-smi -L >/dev/null 2>&1; then labels=(-LE gpu); fi
cd "${BUILD_DIR:-$root/build}"
# --all: env.sh sets OMP_NUM_THREADS=1, which plain nproc honours.
ctest --output-on-failure -j "$(nproc --all)" "${labels[@]}"
