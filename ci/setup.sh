#!/usr/bin/env bash
# Installs everything topotrain needs to build and test, on Debian 12 or Ubuntu 24.04:
# Debian's packages with apt, and ci/requirements.txt (torch 2.11.0 with its CUDA 13
# libraries, transformers, tokenizers, safetensors, h5py: about 5 GB, a few minutes) into the
# project's venv outside the repository (launch/torch.sh: $TOPOTRAIN_VENV, default
# ~/.cache/topotrain/venv), which a fresh clone finds again. A venv leaves the system Python
# alone (PEP 668). Idempotent, and quiet when everything is present.
# The CUDA toolkit (nvcc, with NCCL and cuDNN) is not installed here: where it is found, the
# build compiles the CUDA paths as well.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/launch/torch.sh"

packages=(build-essential cmake git pkg-config python3 python3-venv ccache
          libopenmpi-dev openmpi-bin libhdf5-dev libtomlplusplus-dev libcli11-dev
          nlohmann-json3-dev libgtest-dev libgmock-dev libpcre2-dev libutf8proc-dev
          python3-jinja2)  # the chat-template reference the tokenizer tests render with
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
  echo "ci/setup.sh: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The venv is current when it holds exactly what ci/requirements.txt asked for last time.
requirements=$root/ci/requirements.txt
stamp=$TOPOTRAIN_VENV/topotrain-requirements.txt
if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
  echo "ci/setup.sh: installing torch 2.11.0 (with CUDA 13 libraries), transformers and the test references" \
       "into $TOPOTRAIN_VENV (about 5 GB to download)"
  start=$SECONDS
  # /usr/bin/python3 is the one python3-venv serves; another python3 on PATH (pyenv, conda)
  # may lack ensurepip.
  python=/usr/bin/python3
  [[ -x $python ]] || python=python3
  [[ -x $TOPOTRAIN_VENV/bin/python3 ]] || "$python" -m venv "$TOPOTRAIN_VENV"
  "$TOPOTRAIN_VENV/bin/python3" -m pip install -q --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
  echo "ci/setup.sh: venv ready in $((SECONDS - start)) s"
fi
if ((${#missing[@]} > 0)); then echo "ci/setup.sh: done"; fi
