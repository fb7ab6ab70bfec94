# Sourced by ci/setup.sh, launch/build.sh and launch/env.sh: where the project's Python
# environment lives and which LibTorch topotrain builds against.
#
# TOPOTRAIN_VENV: the venv ci/setup.sh fills from ci/requirements.txt (torch with its CUDA
# libraries, transformers, tokenizers, safetensors: about 5 GB). It lives outside the
# repository so that a fresh clone finds it again instead of downloading it.
TOPOTRAIN_VENV=${TOPOTRAIN_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/topotrain/venv}

# Prints the python3 whose torch topotrain builds against and tests with: the venv's when it
# imports torch, else the first python3 on PATH that does (a GPU machine's image); returns 1
# when there is none.
topotrain_torch_python() {
  local python
  for python in "$TOPOTRAIN_VENV/bin/python3" "$(command -v python3)"; do
    if [[ -x $python ]] && "$python" -c 'import torch' >/dev/null 2>&1; then
      echo "$python"
      return 0
    fi
  done
  return 1
}

# Prints the folder holding LibTorch's lib/ and share/cmake/: TOPOTRAIN_LIBTORCH when set (an
# unpacked LibTorch archive, or a torch package folder), else the torch of
# topotrain_torch_python.
topotrain_libtorch() {
  if [[ -n ${TOPOTRAIN_LIBTORCH:-} ]]; then
    echo "$TOPOTRAIN_LIBTORCH"
    return 0
  fi
  local python
  python=$(topotrain_torch_python) || return 1
  "$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))'
}
