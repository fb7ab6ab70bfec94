#!/usr/bin/env bash
# Fails if a shell script counts cores with plain `nproc`. GNU nproc honours OMP_NUM_THREADS,
# which launch/env.sh sets to 1 for the ranks: a script that sources it and then builds with
# `-j` set by plain nproc builds on one core (a GPU machine's 3-minute build did not end in 7 minutes).
# `nproc --all` counts the machine's cores.
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
status=0
hits=$(grep -rnoE --include='*.sh' --include='*.sbatch' '\$\(nproc[^)]*\)' launch ci bench tests | grep -v -- '--all') ||
  status=$?
if [ "$status" -gt 1 ]; then
  echo "error: grep failed (status $status)"
  exit 1
fi
if [ "$status" -eq 0 ]; then
  echo "$hits"
  echo "error: plain nproc above counts OMP_NUM_THREADS (1 after launch/env.sh), not the cores; use nproc --all"
  exit 1
fi
echo "every nproc in launch ci bench tests counts every core"
