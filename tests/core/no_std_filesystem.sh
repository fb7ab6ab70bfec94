#!/usr/bin/env bash
# Fails if any source uses std::filesystem. Pip wheels of LibTorch export the std::filesystem
# symbols of a statically linked libstdc++ (pytorch/pytorch#133437); they interpose on the
# system libstdc++'s, and std::filesystem code in a binary linked with such a LibTorch
# crashes (SIGSEGV at the first path operation). Use topotrain/core/files.h instead.
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
status=0
hits=$(grep -rnE --include='*.h' --include='*.hpp' --include='*.cpp' --include='*.cc' --include='*.cu' \
         'std::(experimental::)?filesystem|<(experimental/)?filesystem>' src include tests bench) || status=$?
if [ "$status" -gt 1 ]; then
  echo "error: grep failed (status $status)"
  exit 1
fi
if [ "$status" -eq 0 ]; then
  echo "$hits"
  echo "error: std::filesystem is used above; pip LibTorch's exported std::filesystem symbols make it crash" \
       "in any binary linked with LibTorch (pytorch/pytorch#133437). Use topotrain/core/files.h instead."
  exit 1
fi
echo "no std::filesystem in src include tests bench"
