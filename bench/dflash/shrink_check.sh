#!/usr/bin/env bash
# On a GPU machine (one GPU is enough): builds into /root/build-gpu, runs the GPU tests, then
# dflash_train 1t1d on GPU 0 (qwen3-0.6b target, 12 steps, train.oom = "shrink") over CUDA
# IPC and over MPI with an injected out-of-memory on the drafter (rank 1, step 5) and on the
# target (rank 0, batch 5): each run must restart its stream with half the budget and finish.
# SKIP_MOE=1 leaves out the closing moe_train smoke run. Logs go to $OUT.
#   OUT=/tmp/shrink bash bench/dflash/shrink_check.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$(mktemp -d)}
start=$SECONDS
export BUILD_DIR=/root/build-gpu BUILD_TYPE=Release
if ! launch/build.sh >"$OUT/gpu-build.log" 2>&1; then grep -E "error" "$OUT/gpu-build.log" | head -30; echo BUILD FAILED; exit 1; fi
grep -E "warning:" "$OUT/gpu-build.log" | grep -v "^/usr" | head -10
echo "built at $((SECONDS - start)) s"
source launch/env.sh
bin=$BUILD_DIR/bin
(cd $BUILD_DIR && timeout 150 ctest --output-on-failure -L gpu > "$OUT/gpu-ctest.log" 2>&1; tail -6 "$OUT/gpu-ctest.log")
work=$(mktemp -d)
python3 bench/moe/make_dataset.py "$work/docs.h5" --tokens 400000 --mean-len 2048 >/dev/null
for link in ipc mpi; do
  sed -e 's/^devices = \[1\]/devices = [0]/' -e "s/^hidden_states = .*/hidden_states = \"$link\"/" topology/1t1d.toml > "$work/one-$link.toml"
  for fault in 1:5 0:5; do
    [[ $((SECONDS - start)) -gt 480 ]] && { echo "time up"; break 2; }
    echo "## dflash 1t1d one GPU over $link, TOPOTRAIN_FAULT_OOM=$fault, train.oom=shrink"
    timeout 120 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x TOPOTRAIN_FAULT_OOM=$fault $bin/dflash_train "$work/one-$link.toml" \
      --set model.preset=qwen3-0.6b --set data.path="$work/docs.h5" --set train.max_steps=12 --set log.every=4 --set train.oom=shrink \
      --set checkpoint.dir="$work" --set checkpoint.run="one-$link-${fault/:/-}" > "$OUT/dflash-$link-${fault/:/-}.log" 2>&1; echo "rc=$?"
    grep -E "step +(4|8|12) |shrink|restarting|retrying|drafter done|target stream|error|Error" "$OUT/dflash-$link-${fault/:/-}.log" | sed 's/^.*\] //' | cut -c1-220 | tail -8
  done
done
[[ -n ${SKIP_MOE:-} ]] || { echo "## moe smoke (defaults, 20 steps)"
timeout 150 launch/moe-smoke.sh 1 --set train.max_steps=20 > "$OUT/moe-smoke.log" 2>&1; echo "rc=$?"; grep -E "step +(10|20) |bottleneck|tokens/s|forward|backward|other" "$OUT/moe-smoke.log" | tail -10; }
echo "all done at $((SECONDS - start)) s"
