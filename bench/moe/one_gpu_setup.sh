# Sourced first by the one-GPU scripts (bench/moe: profile.sh, checkpoint_interference.sh;
# bench/models/expert_layout.sh, bench/dflash/speculate.sh): moves to the project root and sets BUILD_DIR (default
# build-gpu) and OUT (default a new temporary folder, created). Then, for the script:
#   build_unless_skipped NAME   launch/build.sh into BUILD_DIR unless SKIP_BUILD=1; its log is
#                               $OUT/NAME-build.log, whose tail a failure prints (then exit 1)
#   one_rank_topology FILE DEVICES  writes the topology of one trainer rank on DEVICES
#                               ('[0]': the first GPU; '"cpu"': a CPU rank)
# shellcheck shell=bash
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
export BUILD_DIR=${BUILD_DIR:-$root/build-gpu}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT" || exit 1

build_unless_skipped() {
  [[ ${SKIP_BUILD:-0} == 1 ]] && return
  launch/build.sh >"$OUT/$1-build.log" 2>&1 || { tail -40 "$OUT/$1-build.log"; exit 1; }
}

one_rank_topology() {
  printf '[topology]\nname = "one"\ninterconnect = "nvlink"\n[[roles]]\nrole = "trainer"\nranks = [0]\ndevices = %s\n' \
    "$2" >"$1"
}
