#!/usr/bin/env bash
# Builds the programs the demo runs and runs the main job on the embedded default: 4 CPU
# ranks, no GPU, then prints where the time went. Extra arguments go to moe_train (e.g.
# --resume auto). On a machine without a GPU the CUDA paths are left out of this build
# (TOPOTRAIN_CUDA=OFF): kernels only a GPU runs are not worth the wait here. launch/build.sh
# (or ci/test.sh) builds everything else.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cuda=()
if ! nvidia-smi -L >/dev/null 2>&1; then cuda=(-DTOPOTRAIN_CUDA=OFF); fi
BUILD_TARGETS="moe_train topotrain_report" "$root/launch/build.sh" "${cuda[@]}"
source "$root/launch/env.sh"
cd "$root"
mpirun --oversubscribe -np 4 moe_train topology/cpu4.toml "$@"
topotrain-report checkpoints/cpu4
