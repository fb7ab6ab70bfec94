#!/usr/bin/env bash
# Installs everything topotrain needs to build and test, on Debian 12 or Ubuntu 24.04.
# Idempotent and quiet when already done. LibTorch: the pip torch's when
# `python3 -c 'import torch'` works (GPU machines), else Debian's libtorch-dev (CPU only).
set -euo pipefail

packages=(build-essential cmake git pkg-config python3
          libopenmpi-dev openmpi-bin libhdf5-dev libtomlplusplus-dev libcli11-dev
          nlohmann-json3-dev libgtest-dev libgmock-dev libpcre2-dev libutf8proc-dev
          python3-jinja2)  # the chat-template reference the tokenizer tests render with
if ! python3 -c 'import torch' >/dev/null 2>&1; then
  packages+=(libtorch-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then exit 0; fi

echo "ci/setup.sh: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "ci/setup.sh: done"
