#!/usr/bin/env bash
# dflash_train pipelines on a machine with two GPUs (an H200 pair), random weights, synthetic
# documents of ~4K tokens, 16K-token batches:
#   1t1d     topology/1t1d.toml: a qwen3-8b-shaped target on GPU 0 feeds a 5-layer drafter of
#            hidden 4096 on GPU 1 (CUDA IPC link)
#   fan-in   bench/dflash/fan-in-2gpu.toml: seven qwen3-0.6b-shaped targets share GPU 0 and feed
#            one drafter on GPU 1
# Each run's log (targets' rates, the drafter's progress lines) and topotrain-report's
# breakdown (warm-up steps left out) go to $OUT (or a temporary folder).
#   1t1d-one-gpu  the 1t1d pipeline with both ranks on GPU 0 (CUDA IPC within one device): the
#            one-GPU drafter goal's run; the drafter's MFU there counts its own FLOPs over its
#            step, which now shares the GPU with the target's forwards, and the report's "one
#            GPU shared by ranks" line both ranks' FLOPs over the time they both ran. ONE_GPU_BUDGET (16384)
#            sets its token_budget: on an 80 GB H100 the drafter runs out of memory at 16384
#            beside the target (8192 fits); an H200 holds both at 16384. ONE_GPU_QUEUE (20, as
#            topology/1t1d.toml) sets its queue_depth: each queued batch holds tokens x taps x
#            hidden bf16 values on the shared card (670 MB at 16384 tokens), and without MPS the
#            two ranks take turns on it, so a target far ahead should not speed the drafter (not
#            measured yet: the next sitting's queue-2 run against the queue-20 one)
# RUNS picks the runs (default "1t1d fan-in"); the small-LINK-DEPTH runs are 1t1d with a
# qwen3-0.6b-shaped target and drafter over link LINK (ipc, nccl, mpi) at queue depth DEPTH
# (VARIANTS=1 adds small-ipc-20 small-nccl-20 small-mpi-20 small-ipc-2): the drafter's step
# time in each tells whether the link costs the drafter time. REPORT_SKIP (3): the steps of each
# rank the report leaves out (a target runs ahead until the queue is full: leave those out to
# read the steady state of a run longer than queue_depth steps). PROFILE_STEP=N profiles step N
# on every rank (log.profile_step) and keeps the summaries in $OUT.
#   bash bench/dflash/pipeline.sh          (from the project root; builds into build-gpu)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
source bench/dflash/bench_setup.sh

run() {  # run NAME NP TOPOLOGY STEPS [--set ...]
  local name=$1 np=$2 topology=$3 steps=$4
  shift 4
  echo "## $name: mpirun -np $np dflash_train $topology --set train.max_steps=$steps $*"
  timeout "${RUN_TIMEOUT_S:-240}" mpirun --allow-run-as-root --bind-to none -np "$np" -x LD_LIBRARY_PATH \
    -x NCCL_NVLS_ENABLE "$bin/dflash_train" "$topology" --set data.path="$work/docs.h5" \
    --set train.max_steps="$steps" --set log.every=5 --set checkpoint.every_steps=-1 \
    --set checkpoint.dir="$work" --set checkpoint.run="$name" --set log.profile_step="${PROFILE_STEP:-0}" "$@" \
    > "$results/dflash-$name.log" 2>&1 || { tail -30 "$results/dflash-$name.log"; return 1; }
  for profile in "$work/$name"/profile-*.txt; do
    [[ -f $profile ]] && cp "$profile" "$results/dflash-$name-$(basename "$profile")"
  done
  grep -E "\[rank [0-9]+ (target|drafter)\] (step |target stream|drafter done|drafter:)" "$results/dflash-$name.log"
  "$bin/topotrain-report" "$work/$name" --skip "${REPORT_SKIP:-3}" | tee "$results/dflash-$name-report.txt"
}

{
  echo "# bench/dflash/pipeline.sh on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$(nvidia-smi -L | wc -l), $(date -u +%F)"
  runs=${RUNS:-1t1d fan-in}
  [[ ${VARIANTS:-0} == 1 ]] && runs+=" small-ipc-20 small-nccl-20 small-mpi-20 small-ipc-2"
  for name in $runs; do
    case $name in
      1t1d) run 1t1d 2 topology/1t1d.toml "${STEPS_1T1D:-30}" ;;
      fan-in) run fan-in 8 bench/dflash/fan-in-2gpu.toml "${STEPS_FAN_IN:-60}" ;;
      1t1d-one-gpu)
        sed -e 's/^devices = \[1\]$/devices = [0]/' -e "s/^queue_depth = .*/queue_depth = ${ONE_GPU_QUEUE:-20}/" \
          topology/1t1d.toml > "$work/$name.toml"
        grep -q '^devices = \[1\]' "$work/$name.toml" && { echo "topology/1t1d.toml: no drafter on GPU 1 to move" >&2; exit 2; }
        run "$name" 2 "$work/$name.toml" "${STEPS_1T1D:-30}" --set "train.token_budget=${ONE_GPU_BUDGET:-16384}" ;;
      small-*-*)
        IFS=- read -r _ link depth <<< "$name"
        sed -e "s/^hidden_states = .*/hidden_states = \"$link\"/" -e "s/^queue_depth = .*/queue_depth = $depth/" \
          topology/1t1d.toml > "$work/$name.toml"
        run "$name" 2 "$work/$name.toml" "${STEPS_SMALL:-12}" --set model.preset=qwen3-0.6b ;;
      *) echo "unknown run $name" >&2; exit 2 ;;
    esac
  done
} 2>&1 | tee "$results/dflash-pipeline.txt"
