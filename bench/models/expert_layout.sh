#!/usr/bin/env bash
# The experts' two group layouts side by side on one GPU: expert order (ExpertBackend
# grouped_mm) and busiest first (grouped_mm_busiest_first, the default). First the grouped
# GEMMs alone (grouped_mm_skew.py: per routing, each projection's forward, input and weight
# gradient, the weight gradient also with its groups busiest first); then model_bench's forward
# + backward of one 16384-token micro-batch at the HF Qwen3Moe reference shape (~4K-token
# documents, 2048-6144) and moe-500m (~2K, 1024-3072), the layouts interleaved ROUNDS times
# (default 3) so that drift hits both alike. model_bench prints the routing's peak expert load:
# the layouts differ only where it is uneven, and its one repeated micro-batch keeps the
# routing of initialisation. So last, training: moe_train at the reference shape, STEPS (110)
# steps with checkpoints off (clipping and progress on) on ~4K-token documents, where every layer's routing
# collapses within a few steps; tok/s and expert load of the steps after the 40th (cuDNN's
# window plans built), TRAIN_ROUNDS (2) times each layout, interleaved
# (TOPOTRAIN_EXPERT_LAYOUT=expert_order selects the other layout).
#   bench/models/expert_layout.sh                 (from the project root; builds into BUILD_DIR)
#   SKIP_BUILD=1 ROUNDS=5 SECTIONS="bench train" bench/models/expert_layout.sh   (alone bench train)
set -uo pipefail
# shellcheck source=bench/moe/one_gpu_setup.sh
source "$(dirname "$0")/../moe/one_gpu_setup.sh"
build_unless_skipped expert_layout
# shellcheck source=/dev/null
source launch/env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sections=" ${SECTIONS:-alone bench train} "
python3 bench/moe/reference_shape.py "$work/reference-shape" >/dev/null || exit 1
if [[ $sections == *" alone "* ]]; then
  echo "== grouped GEMMs alone (us, median of 20)"
  python3 bench/models/grouped_mm_skew.py 2>&1 | tee "$OUT/grouped_mm_skew.txt"
fi
[[ $sections == *" bench "* ]] && echo "== forward + backward of one micro-batch, model_bench"
for round in $( [[ $sections == *" bench "* ]] && seq "${ROUNDS:-3}"); do
  for shape in reference moe-500m; do
    if [[ $shape == reference ]]; then args=("$work/reference-shape/config.json" 16384 2048-6144 20)
    else args=(moe-500m 16384 1024-3072 20); fi
    for layout in grouped busiest_first; do
      line=$(MODEL_BENCH_EXPERTS=$layout "$BUILD_DIR/bin/model_bench" "${args[@]}" 2>&1 | tail -1)
      echo "round $round, $shape, $layout: ${line#*: }" | tee -a "$OUT/model_bench.txt"
    done
  done
done
[[ $sections == *" train "* ]] || exit 0
echo "== training, moe_train (summarize.py timings --skip 40)"
python3 bench/moe/make_dataset.py "$work/docs4k.h5" --tokens 8000000 --mean-len 4096 >/dev/null || exit 1
one_rank_topology "$work/one.toml" '[0]'
for round in $(seq "${TRAIN_ROUNDS:-2}"); do
  for layout in expert_order busiest_first; do
    rm -rf "$work/runs"
    TOPOTRAIN_EXPERT_LAYOUT=$layout timeout 300 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH \
      -x OMP_NUM_THREADS -x TOPOTRAIN_EXPERT_LAYOUT "$BUILD_DIR/bin/moe_train" "$work/one.toml" \
      --set "model.config=$work/reference-shape/config.json" --set "data.path=$work/docs4k.h5" \
      --set train.token_budget=16384 --set train.lr=6e-4 --set "train.max_steps=${STEPS:-110}" \
      --set checkpoint.every_steps=-1 --set "checkpoint.dir=$work/runs" --set checkpoint.run=r \
      >"$OUT/train-$layout-$round.log" 2>&1 || { echo "moe_train failed:"; tail -5 "$OUT/train-$layout-$round.log"; }
    echo "round $round, $layout: $(python3 bench/moe/summarize.py timings "$work/runs/r" --skip 40)" |
      tee -a "$OUT/training.txt"
  done
done
