#!/usr/bin/env bash
# Before/after on one GPU, same sitting: builds this tree (into /root/build-gpu) and an older
# one (OLD_TREE, default .old: a source tree made by `git archive REV | tar -x -C .old`; into
# /root/build-old) side by side, runs the GPU tests of this tree (SKIP_GPU_TESTS=1 leaves them
# out), then moe_train from both builds, interleaved, with 16K-token micro-batches for STEPS
# steps (default 40; idealised twice, then defaults) at each of SHAPES (default "moe-500m
# reference"; SKIP_REFERENCE_SHAPE=1 leaves the second out): moe-500m on ~2K-token documents
# and the HF Qwen3Moe reference shape (hidden 1024, 12 layers, 16 experts top-8 of 512, vocab
# 151936, tied; config.json written with transformers) on ~4K-token documents; then, unless
# SKIP_DFLASH=1, dflash_train (1t1d on one GPU over CUDA IPC, qwen3-0.6b target, 30 steps).
# Each run prints its progress line at the last step; both builds' phase reports of the second
# idealised run (leaving out the first STEPS/2 steps: the reference shape builds cuDNN plans in
# its first ~40) go to $OUT with the logs.
#   OUT=/tmp/compare bash bench/compare/before_after.sh
#   SHAPES=reference STEPS=100 SKIP_DFLASH=1 bash bench/compare/before_after.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$(mktemp -d)}
start=$SECONDS
export BUILD_TYPE=Release
( BUILD_DIR=/root/build-gpu launch/build.sh >"$OUT/build-new.log" 2>&1; echo "new rc=$?" >> "$OUT/build-rc.txt" ) &
( ln -sfn "$PWD/.deps" "${OLD_TREE:-.old}/.deps"; cd "${OLD_TREE:-.old}" && BUILD_DIR=/root/build-old launch/build.sh -DTOPOTRAIN_BUILD_TESTS=OFF >"$OUT/build-old.log" 2>&1; echo "old rc=$?" >> "$OUT/build-rc.txt" ) &
wait
cat "$OUT/build-rc.txt"; echo "built at $((SECONDS - start)) s"
grep -E "warning:" "$OUT/build-new.log" | grep -v "^/usr" | head -10
grep -q "new rc=0" "$OUT/build-rc.txt" || { tail -40 "$OUT/build-new.log"; exit 1; }
ln -sfn /root/build-gpu /root/build-new
source launch/env.sh
[[ -n ${SKIP_GPU_TESTS:-} ]] || (cd /root/build-gpu && timeout 150 ctest --output-on-failure -L gpu > "$OUT/gpu-ctest.log" 2>&1; tail -12 "$OUT/gpu-ctest.log")
echo "gpu tests done at $((SECONDS - start)) s"
work=$(mktemp -d)
python3 bench/moe/make_dataset.py "$work/docs.h5" --tokens 2000000 --mean-len 2048 >/dev/null
printf '[topology]\nname = "one"\ninterconnect = "nvlink"\n[[roles]]\nrole = "trainer"\nranks = [0]\ndevices = [0]\n' > "$work/one.toml"
python3 bench/moe/make_dataset.py "$work/docs4k.h5" --tokens 2000000 --mean-len 4096 >/dev/null
python3 bench/moe/reference_shape.py "$work/reference-shape"
shape_args() {  # SHAPE: the model and data settings of moe-500m or the reference shape
  if [[ $1 == reference ]]; then
    echo "--set model.config=$work/reference-shape/config.json --set data.path=$work/docs4k.h5"
  else
    echo "--set model.preset=moe-500m --set data.path=$work/docs.h5"
  fi
}
moe() {  # moe TREE SHAPE NAME [--set ...]
  local tree=$1 shape=$2 name=$3; shift 3
  # shellcheck disable=SC2046
  timeout 120 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH /root/build-$tree/bin/moe_train "$work/one.toml" \
    $(shape_args "$shape") --set train.token_budget=16384 --set "train.max_steps=$steps" \
    --set log.every=10 --set checkpoint.dir="$work" --set checkpoint.run="$name" "$@" > "$OUT/moe-$name.log" 2>&1
  echo "moe $name rc=$? $(grep -E "step +$steps " "$OUT/moe-$name.log" | sed 's/.*\] //' | cut -c1-150)"
}
steps=${STEPS:-40}
shapes=${SHAPES:-moe-500m reference}
[[ -n ${SKIP_REFERENCE_SHAPE:-} ]] && shapes=${shapes//reference/}
for shape in $shapes; do
  for round in 1 2; do
    for tree in old new; do
      moe $tree $shape "$tree-$shape-ideal-$round" --set checkpoint.every_steps=-1
    done
  done
  for tree in old new; do moe $tree $shape "$tree-$shape-defaults"; done
  for tree in old new; do
    /root/build-gpu/bin/topotrain-report --skip $((steps / 2)) "$work/$tree-$shape-ideal-2" > "$OUT/report-$tree-$shape-ideal.txt" 2>&1
  done
  head -20 "$OUT/report-new-$shape-ideal.txt"
  echo "old build, same run:"; grep -E "^  (forward|backward|optimizer|wall) " "$OUT/report-old-$shape-ideal.txt"
done
echo "moe done at $((SECONDS - start)) s"
[[ -n ${SKIP_DFLASH:-} ]] && exit 0
sed -e 's/^devices = \[1\]/devices = [0]/' -e 's/^hidden_states = .*/hidden_states = "ipc"/' topology/1t1d.toml > "$work/one-ipc.toml"
for tree in old new old new; do
  [[ $((SECONDS - start)) -gt 500 ]] && { echo "time up before dflash $tree"; break; }
  timeout 100 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH /root/build-$tree/bin/dflash_train "$work/one-ipc.toml" \
    --set model.preset=qwen3-0.6b --set data.path="$work/docs.h5" --set train.max_steps=30 --set log.every=10 \
    --set checkpoint.every_steps=-1 --set checkpoint.dir="$work" --set checkpoint.run="dflash-$tree-$SECONDS" > "$OUT/dflash-$tree.log" 2>&1
  echo "dflash $tree rc=$? $(grep -E 'drafter\] step +30 ' "$OUT/dflash-$tree.log" | sed 's/.*\] //' | cut -c1-160)"
  grep -E "target stream .* done" "$OUT/dflash-$tree.log" | sed 's/.*\] //'
done
echo "all done at $((SECONDS - start)) s"
