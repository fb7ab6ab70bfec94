#!/usr/bin/env bash
# expect.sh ok|fail REGEX TIMEOUT COMMAND...
# Runs COMMAND; passes when it exits 0 (ok) or non-zero (fail) within TIMEOUT seconds and
# its combined output matches the extended regex REGEX. A timeout always fails: it means
# some rank hung.
set -u
expect=$1 regex=$2 limit=$3
shift 3
output=$(mktemp)
trap 'rm -f "$output"' EXIT
start=$(date +%s)
timeout --kill-after=5 "$limit" "$@" >"$output" 2>&1
code=$?
elapsed=$(( $(date +%s) - start ))
cat "$output"
echo "--- exit $code after ${elapsed}s (expected: $expect, within ${limit}s)"
if [[ $code -eq 124 || $code -eq 137 ]]; then echo "FAIL: timed out (a rank hung)"; exit 1; fi
if [[ $expect == ok && $code -ne 0 ]]; then echo "FAIL: expected exit 0"; exit 1; fi
if [[ $expect == fail && $code -eq 0 ]]; then echo "FAIL: expected a non-zero exit"; exit 1; fi
if ! grep -Eq -- "$regex" "$output"; then echo "FAIL: output does not match: $regex"; exit 1; fi
echo "PASS"
