#!/usr/bin/env bash
# Builds topotrain and runs the main job on the embedded default: 4 CPU ranks, no GPU,
# then prints where the time went. Extra arguments go to moe_train (e.g. --resume auto).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/launch/build.sh"
source "$root/launch/env.sh"
cd "$root"
mpirun --oversubscribe -np 4 moe_train topology/cpu4.toml "$@"
topotrain-report checkpoints/cpu4
