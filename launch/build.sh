#!/usr/bin/env bash
# Configures and builds topotrain into BUILD_DIR (default: build; BUILD_TYPE default
# Release, whose lack of debug info keeps LibTorch-heavy builds short).
#   launch/build.sh [extra cmake args...]
# LibTorch: TOPOTRAIN_LIBTORCH when set (an unpacked LibTorch, or a torch package folder),
# else the torch of the venv ci/setup.sh makes, else the torch python3 imports (a GPU
# machine's image); see launch/torch.sh. That python3 also runs the `hf` reference tests.
# toml++, PCRE2 and utf8proc unpacked into .deps/root (launch/prepare-gpu-deps.sh) are used
# when present; ccache, when installed, caches every compile (C++, CUDA, the precompiled
# header) across build folders and fresh clones.
# BUILD_TARGETS (space-separated CMake targets) builds only those.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
source "$root/launch/torch.sh"
if ! libtorch=$(topotrain_libtorch); then
  echo "launch/build.sh: no LibTorch found: run ci/setup.sh (it installs torch into $TOPOTRAIN_VENV)," \
       "or set TOPOTRAIN_LIBTORCH to an unpacked LibTorch" >&2
  exit 1
fi
prefix=("$libtorch")
if [[ -d $root/.deps/root/usr ]]; then prefix+=("$root/.deps/root/usr"); fi
joined=$(IFS=';'; echo "${prefix[*]}")
args=(-DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DCMAKE_PREFIX_PATH="$joined")
if python=$(topotrain_torch_python); then args+=(-DTOPOTRAIN_PYTHON="$python"); fi
if command -v ccache >/dev/null; then
  args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  # The precompiled header is cacheable only with these (ccache's manual, "Precompiled headers").
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
  # Paths inside the clone are hashed relative to it, so that a clone in another folder hits.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
fi
# Configuring every time is cheap when nothing changed, and repairs a build folder whose
# first configure failed.
cmake -S "$root" -B "$build" "${args[@]}" "$@" >/dev/null
targets=()
for target in ${BUILD_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$build" -j "${JOBS:-$(nproc --all)}" "${targets[@]}"
