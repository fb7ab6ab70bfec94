#!/usr/bin/env bash
# The experts' two group layouts side by side on one GPU: busiest first (the default) and expert
# order (model::ExpertLayout, docs/model.md). Sections (SECTIONS, default all three):
#   alone    the grouped GEMMs alone (grouped_mm_skew.py: per routing, each projection's forward,
#            input and weight gradient, the weight gradient also with its groups busiest first);
#   train    moe_train at the HF Qwen3Moe reference shape, STEPS (110) steps with checkpoints off
#            (clipping and progress on) on ~4K-token documents, where every layer's routing
#            collapses within a few steps; tok/s and expert load of the steps after the 40th
#            (cuDNN's window plans built), TRAIN_ROUNDS (2) times each layout, interleaved so that
#            drift hits both alike;
#   profile  bench/moe/profile.sh of the reference shape under each layout: the device-only
#            steps' kernel time by kind (tables in $OUT/<layout>/).
# (model_bench repeats one micro-batch without an optimizer step, so its copies are cast once,
# in expert order, and never reordered: it cannot show this layout.) The setting
# model.expert_layout chooses moe_train's layout.
#   bench/models/expert_layout.sh                 (from the project root; builds into BUILD_DIR)
#   SKIP_BUILD=1 TRAIN_ROUNDS=3 SECTIONS="train profile" bench/models/expert_layout.sh
set -uo pipefail
# shellcheck source=bench/moe/one_gpu_setup.sh
source "$(dirname "$0")/../moe/one_gpu_setup.sh"
build_unless_skipped expert_layout
# shellcheck source=/dev/null
source launch/env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sections=" ${SECTIONS:-alone train profile} "
python3 bench/moe/reference_shape.py "$work/reference-shape" >/dev/null || exit 1
if [[ $sections == *" alone "* ]]; then
  echo "== grouped GEMMs alone (us, median of 20)"
  python3 bench/models/grouped_mm_skew.py 2>&1 | tee "$OUT/grouped_mm_skew.txt"
fi
if [[ $sections == *" train "* ]]; then
  echo "== training, moe_train (summarize.py timings --skip 40)"
  python3 bench/moe/make_dataset.py "$work/docs4k.h5" --tokens 8000000 --mean-len 4096 >/dev/null || exit 1
  one_rank_topology "$work/one.toml" '[0]'
  for round in $(seq "${TRAIN_ROUNDS:-2}"); do
    for layout in expert_order busiest_first; do
      rm -rf "$work/runs"
      timeout 300 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH \
        -x OMP_NUM_THREADS "$BUILD_DIR/bin/moe_train" "$work/one.toml" --set "model.expert_layout=$layout" \
        --set "model.config=$work/reference-shape/config.json" --set "data.path=$work/docs4k.h5" \
        --set train.token_budget=16384 --set train.lr=6e-4 --set "train.max_steps=${STEPS:-110}" \
        --set checkpoint.every_steps=-1 --set "checkpoint.dir=$work/runs" --set checkpoint.run=r \
        >"$OUT/train-$layout-$round.log" 2>&1 || { echo "moe_train failed:"; tail -5 "$OUT/train-$layout-$round.log"; }
      echo "round $round, $layout: $(python3 bench/moe/summarize.py timings "$work/runs/r" --skip 40)" |
        tee -a "$OUT/training.txt"
    done
  done
fi
[[ $sections == *" profile "* ]] || exit 0
for layout in expert_order busiest_first; do
  EXPERT_LAYOUT=$layout OUT="$OUT/$layout" SKIP_BUILD=1 SHAPES=reference \
    bash bench/moe/profile.sh >"$OUT/profile-$layout.txt" 2>&1
  echo "== profile, $layout: $(grep -E '^== reference, device' "$OUT/profile-$layout.txt" | cut -c1-120)"
  grep -E "device span|^grouped GEMM|^gather|^copy|^optimizer" "$OUT/$layout/kernels-reference-device.txt"
done
