#!/usr/bin/env bash
# A short moe_train run on the GPUs of this machine (default: all of them), then the
# report: a smoke test of the GPU training path. Extra arguments go to moe_train.
#   launch/moe-smoke.sh [NGPUS] [--set key=value ...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-$(nvidia-smi -L | wc -l)}
shift || true
export BUILD_DIR=${BUILD_DIR:-$root/build-gpu} BUILD_TYPE=${BUILD_TYPE:-Release}
"$root/launch/build.sh" -DTOPOTRAIN_BUILD_TESTS=${TOPOTRAIN_BUILD_TESTS:-ON} >/dev/null
source "$root/launch/env.sh"
export PATH=$BUILD_DIR/bin:$PATH
work=$(mktemp -d)
ranks=$(seq -s, 0 $((n - 1)))
printf '[topology]\nname = "smoke%d"\ninterconnect = "nvlink"\n[[roles]]\nrole = "trainer"\nranks = [%s]\ndevices = [%s]\n' \
  "$n" "$ranks" "$ranks" > "$work/smoke.toml"
mpirun --bind-to none -np "$n" -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x OMP_NUM_THREADS \
  moe_train "$work/smoke.toml" --set checkpoint.dir="$work" --set log.every=1 "$@"
topotrain-report "$work/smoke$n"
