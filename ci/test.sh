#!/usr/bin/env bash
# Builds topotrain and runs the whole test suite: the CPU tests, the `hf` reference tests
# against transformers and tokenizers, and the GPU tests where a GPU is present. Wherever a
# CUDA toolkit is found the CUDA paths must compile and link (TOPOTRAIN_CUDA=ON), so a CUDA
# error fails here even on a machine without a GPU. Without a GPU, the kernels are compiled
# for Hopper (sm_90) alone, the GPU this project's GPU runs use.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gpu=0
if nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
cuda=()
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cuda=(-DTOPOTRAIN_CUDA=ON)
  if ((!gpu)); then cuda+=(-DCMAKE_CUDA_ARCHITECTURES=90); fi
fi
"$root/launch/build.sh" "${cuda[@]}"
source "$root/launch/env.sh"
cd "${BUILD_DIR:-$root/build}"
count() { ctest -N "$@" | sed -n 's/^Total Tests: //p'; }
if [[ $(count -L '^hf$') == 0 ]]; then
  echo "ci/test.sh: no hf tests were registered: the build's python cannot import transformers" \
       "(run ci/setup.sh; the CMake log names the python it tried)" >&2
  exit 1
fi
labels=()
if ((!gpu)); then
  labels=(-LE '^gpu$')
  echo "ci/test.sh: no GPU here: the $(count -L '^gpu$') gpu-labelled tests are built, not run"
fi
# --all: env.sh sets OMP_NUM_THREADS=1, which plain nproc honours.
ctest --output-on-failure -j "$(nproc --all)" "${labels[@]}"
