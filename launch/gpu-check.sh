#!/usr/bin/env bash
# On a GPU machine: build into build-gpu and run the whole test suite, gpu label included.
# Logs go to $OUT (or build-gpu/) as gpu-build.log and gpu-ctest.log.
#   launch/gpu-check.sh [ctest args...]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/build-gpu}
mkdir -p "$out"
export BUILD_DIR=$root/build-gpu BUILD_TYPE=Release
if ! "$root/launch/build.sh" >"$out/gpu-build.log" 2>&1; then
  tail -50 "$out/gpu-build.log"
  echo "gpu-check: build failed"
  exit 1
fi
grep -E "warning:" "$out/gpu-build.log" | grep -v "^/usr" | head -20
source "$root/launch/env.sh"
cd "$BUILD_DIR" && ctest --output-on-failure -j 8 "$@" >"$out/gpu-ctest.log" 2>&1
status=$?
tail -30 "$out/gpu-ctest.log"
exit $status
