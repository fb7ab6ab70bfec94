#!/usr/bin/env bash
# Where one training step's device time goes, at the two shapes the MFU goal names: moe-500m
# on ~2K-token documents and the HF Qwen3Moe reference shape (hidden 1024, 12 layers, 16
# experts top-8 of 512, vocab 151936, tied; its config.json written with transformers) on
# ~4K-token documents, both with 16384-token micro-batches on one GPU. Each runs PROFILE_STEPS
# (50: past the first ~40 steps, in which cuDNN builds the plans of the reference shape's
# document windows) steps idealised (checkpoints off: the profiled step is a plain training
# step) with log.profile_step = PROFILE_STEPS - 1, then bench/moe/kernel_table.py sums the
# step's device time by kernel, by kind and by phase; then again with the last 4 steps profiled
# device only, whose tables are per step of the steady state. Prints each run's last progress
# line and the tables; the tables, profile summaries and logs go to $OUT (default: a new
# temporary folder). AFTER_SNAPSHOT=1 turns checkpoints on at the step before each run's first
# profiled step (checkpoint.every_steps), so that the step profiled with its host calls, and
# the first of the four device-only ones, is the step after a snapshot: what it waits for
# while the snapshot's device-to-host copy runs. (The last step then also waits for that
# checkpoint's write before its own.) EXPERT_LAYOUT sets model.expert_layout (default: the default).
#   bench/moe/profile.sh            (from the project root; builds into BUILD_DIR, default build-gpu)
#   SKIP_BUILD=1 SHAPES="reference" bench/moe/profile.sh
set -uo pipefail
# shellcheck source=bench/moe/one_gpu_setup.sh
source "$(dirname "$0")/one_gpu_setup.sh"
steps=${PROFILE_STEPS:-50}
shapes=${SHAPES:-"reference moe-500m"}
build_unless_skipped profile
# shellcheck source=/dev/null
source launch/env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
one_rank_topology "$work/one.toml" '[0]'
for shape in $shapes; do
  if [[ $shape == reference ]]; then
    python3 bench/moe/make_dataset.py "$work/docs4k.h5" --tokens 4000000 --mean-len 4096 >/dev/null || exit 1
    python3 bench/moe/reference_shape.py "$work/reference-shape" ||
      exit 1
    model=(--set "model.config=$work/reference-shape/config.json" --set "data.path=$work/docs4k.h5")
  else
    python3 bench/moe/make_dataset.py "$work/docs.h5" --tokens 4000000 --mean-len 2048 >/dev/null || exit 1
    model=(--set "model.preset=$shape" --set "data.path=$work/docs.h5")
  fi
  # Twice: step PROFILE_STEPS - 1 with the host's calls (which host operation launched what,
  # and the phase table), then the last 4 steps device only (log.profile_host = false): the
  # profiler's per-operation host cost makes a step look idler than it is, so the device-only
  # steps say how busy the GPU really is and what a step's kernels add up to.
  for mode in host device; do
    if [[ $mode == host ]]; then
      first=$((steps - 1)) profile=(--set "log.profile_step=$first")
    else
      first=$((steps - 3))
      profile=(--set "log.profile_step=$first" --set log.profile_steps=4 --set log.profile_host=false)
    fi
    checkpoints=(--set checkpoint.every_steps=-1)
    [[ -n ${EXPERT_LAYOUT:-} ]] && checkpoints+=(--set "model.expert_layout=$EXPERT_LAYOUT")
    [[ ${AFTER_SNAPSHOT:-0} == 1 ]] && checkpoints=(--set "checkpoint.every_steps=$((first - 1))")
    rm -rf "$work/runs/$shape"
    timeout 300 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH -x OMP_NUM_THREADS \
      -x NCCL_NVLS_ENABLE \
      "$BUILD_DIR/bin/moe_train" "$work/one.toml" "${model[@]}" --set train.token_budget=16384 --set train.lr=6e-4 \
      --set "train.max_steps=$steps" --set log.every=5 "${checkpoints[@]}" "${profile[@]}" \
      --set "checkpoint.dir=$work/runs" --set "checkpoint.run=$shape" >"$OUT/profile-$shape-$mode.log" 2>&1
    echo "== $shape, $mode: rc=$? $(grep -E 'step +[0-9]+ ' "$OUT/profile-$shape-$mode.log" | tail -2 | head -1 |
      sed 's/.*\] //' | cut -c1-160)"
    cp "$work/runs/$shape/profile-step$first-rank0.txt" "$OUT/profile-$shape-$mode.txt" 2>/dev/null
    python3 bench/moe/kernel_table.py "$work/runs/$shape/profile-step$first-rank0.json" --top 45 \
      | tee "$OUT/kernels-$shape-$mode.txt"
  done
done
