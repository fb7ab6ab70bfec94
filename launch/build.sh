#!/usr/bin/env bash
# Configures and builds topotrain into BUILD_DIR (default: build; BUILD_TYPE default
# Release, whose lack of debug info keeps LibTorch-heavy builds short), finding LibTorch by
# itself: the pip torch's when python3 can import torch (GPU machines), else the system's
# (Debian's libtorch-dev). toml++, PCRE2 and utf8proc unpacked into .deps/root
# (launch/prepare-gpu-deps.sh) are used when present.
#   launch/build.sh [extra cmake args...]
# BUILD_TARGETS (space-separated CMake targets) builds only those.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
prefix=()
if torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null); then
  prefix+=("$torch_prefix")
fi
if [[ -d $root/.deps/root/usr ]]; then prefix+=("$root/.deps/root/usr"); fi
joined=$(IFS=';'; echo "${prefix[*]:-}")
# Configuring every time is cheap when nothing changed, and repairs a build folder whose
# first configure failed.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} -DCMAKE_PREFIX_PATH="$joined" "$@" >/dev/null
targets=()
for target in ${BUILD_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$build" -j "${JOBS:-$(nproc --all)}" "${targets[@]}"
