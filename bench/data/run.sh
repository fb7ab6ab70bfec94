#!/usr/bin/env bash
# Data benchmarks: packing + prefetch throughput from memory on one core, and
# topotrain-prepare's tokenization throughput (byte tokenizer and a byte-level BPE).
#   bench/data/run.sh [build dir]        (default: build; results also go to $OUT if set)
# The packing numbers are per core: the process is pinned to CPU 0 with taskset.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(realpath "${1:-${BUILD_DIR:-$root/build}}")
out=${OUT:-$build/bench-data}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --build "$build" --target bench_data_packing topotrain_prepare -j "${JOBS:-2}" >/dev/null

{
  echo "# bench/data/run.sh on $(hostname), $(nproc --all) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "## packing + prefetch, one core (taskset -c 0)"
  taskset -c 0 "$build/bin/bench_data_packing" 100 65536 1 1
  # Rank 0 of 8 with 10 accumulation rounds: it lays out all 80 micro-batches of a step
  # and materializes its 10.
  taskset -c 0 "$build/bin/bench_data_packing" 100 65536 8 10

  echo "## topotrain-prepare (wall and CPU time: a loaded machine shows in the difference)"
  TIMEFORMAT='time: wall %R s, user %U s, sys %S s'
  # ~22 MB of English: the Debian license texts, repeated.
  for _ in $(seq 1 200); do cat /usr/share/common-licenses/{Apache-2.0,GPL-3,LGPL-2.1,MPL-2.0,GFDL-1.3}; done \
    > "$work/corpus.txt"
  cat /usr/share/common-licenses/{Apache-2.0,GPL-3,LGPL-2.1,MPL-2.0,GFDL-1.3} > "$work/train.txt"
  python3 "$root/data/make_bpe_tokenizer.py" "$work/train.txt" 400 "$work/tokenizer.json"
  for tokenizer in byte "$work/tokenizer.json"; do
    for threads in 1 0; do
      echo "--tokenizer $(basename "$tokenizer") --threads $threads (0 = all $(nproc --all) cores), --split paragraph"
      time "$build/bin/topotrain-prepare" --quiet --split paragraph --threads "$threads" --tokenizer "$tokenizer" \
        --output "$work/out.h5" "$work/corpus.txt"
    done
  done
} 2>&1 | tee "$out/data_bench.txt"
