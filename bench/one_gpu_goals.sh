#!/usr/bin/env bash
# The one-GPU speed goals' measurements, side by side in one sitting of two calls on a GPU
# machine (an H200; each part under ten minutes after a fresh start), from the project root:
#   PART=moe bash bench/one_gpu_goals.sh     build with tests, `ctest -L gpu`, then bench/moe/run.sh's
#                                            one-gpu-goals section: moe-500m and the HF Qwen3Moe
#                                            reference shape at grad_accum 1, idealised beside the
#                                            defaults, and the reference shape against transformers
#   PART=dflash bash bench/one_gpu_goals.sh  build the four programs it runs, then, in this order
#                                            (the later ones skipped first when time runs short):
#                                            the drafter alone (dflash_bench); one drafter step
#                                            profiled (dflash_bench's PROFILE_DIR); the chunk
#                                            shapes DRAFTER_SHAPES (dflash_bench's backend names:
#                                            default sdpa, sdpa-b16, sdpa-m256, sdpa-b16-m256); the 1t1d
#                                            pipeline with both ranks on the GPU (pipeline.sh's
#                                            1t1d-one-gpu, queue ONE_GPU_QUEUE = 2, 30 steps, report
#                                            from step 6: the shared GPU's line in steady state);
#                                            the frozen target's forward against transformers
#                                            (target_forward.sh); the target's forward alone
#                                            (model_bench) at the same budget, whose rate and the
#                                            drafter's, weighted by FLOPs, bound what the shared GPU
#                                            can reach without MPS
# With BASE_REV (a commit) PART=dflash also builds that commit's dflash_bench (a git worktree,
# built beside this tree's programs), and the drafter runs alone twice on each side,
# alternating: a drafter change measured against its base in one sitting. With GPU_TESTS=1
# PART=dflash builds the tests too and runs `ctest -L gpu` before any timing (a drafter
# change's numbers count only where its GPU tests pass; one call instead of a PART=moe call
# first, when a sitting may get only one).
# The budget is DFLASH_BUDGET tokens where set, else 16384 where the GPU has 100 GB or more and
# 8192 below (at b9f6733 the drafter beside a qwen3-8b-shaped target ran out of memory at 16384
# on 80 GB; grouped keys since 602aaf8 may let it fit). Each step's output goes to
# $OUT (default: a new temporary folder): summary.txt (the lines that hold the numbers, with
# the seconds each step ended at) and one folder or log per step. Later steps are skipped once
# PART_BUDGET_S (480) seconds have passed, and summary.txt says which.
set -uo pipefail
# shellcheck source=bench/moe/one_gpu_setup.sh
source "$(dirname "$0")/moe/one_gpu_setup.sh"
summary=$OUT/summary.txt
note() { echo "[$SECONDS s] $*" | tee -a "$summary"; }
in_time() { (( SECONDS < ${PART_BUDGET_S:-480} )) || { note "skipped (PART_BUDGET_S spent): $1"; return 1; }; }
part=${PART:-}
[[ $part == moe || $part == dflash ]] || { echo "one_gpu_goals.sh: set PART=moe or PART=dflash" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "one_gpu_goals.sh: no nvidia-smi: this needs a GPU machine" >&2; exit 2; }
note "$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1), $(git rev-parse --short HEAD 2>/dev/null)"

# Everything, tests included; then the GPU tests, whose result the summary carries.
build_with_tests() {
  launch/build.sh -DTOPOTRAIN_BUILD_TESTS=ON >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  note "built with tests, $(grep -c 'warning:' "$OUT/build.log") compiler warnings"
}
gpu_tests() {
  (cd "$BUILD_DIR" && timeout 200 ctest -L gpu --output-on-failure >"$OUT/ctest-gpu.log" 2>&1)
  note "ctest -L gpu: $(grep -E 'tests passed' "$OUT/ctest-gpu.log" || echo 'did not finish')"
}

if [[ $part == moe ]]; then
  build_with_tests
  gpu_tests
  in_time "bench/moe/run.sh one-gpu-goals" &&
    OUT=$OUT/moe SKIP_BUILD=1 MOE_BENCH_SECTIONS=one-gpu-goals bash bench/moe/run.sh >"$OUT/moe-run.log" 2>&1
  grep -E '^\| 1 GPU' "$OUT/moe/moe_bench.md" >>"$summary" 2>/dev/null
  note "moe done"
  exit 0
fi

mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
budget=16384
(( mem < 100000 )) && budget=8192
budget=${DFLASH_BUDGET:-$budget}
base_bench=
if [[ -n ${BASE_REV:-} ]]; then
  base_tree=$BUILD_DIR-base-tree
  rm -rf "$base_tree" && git worktree prune
  if git worktree add -f "$base_tree" "$BASE_REV" >"$OUT/base-worktree.log" 2>&1; then
    ln -sfn "$PWD/.deps" "$base_tree/.deps"
    (BUILD_DIR=$BUILD_DIR-base BUILD_TARGETS=dflash_bench "$base_tree/launch/build.sh" -DTOPOTRAIN_BUILD_TESTS=OFF \
      >"$OUT/base-build.log" 2>&1) &
    base_bench=$BUILD_DIR-base/bin/dflash_bench
  else
    note "BASE_REV $BASE_REV: no worktree ($(tail -1 "$OUT/base-worktree.log")); the drafter runs alone on this tree only"
  fi
fi
if [[ ${GPU_TESTS:-0} == 1 ]]; then
  build_with_tests
  gpu_tests  # beside the base's build, if any: the tests time nothing
else
  BUILD_TARGETS="dflash_train topotrain_report dflash_bench model_bench" launch/build.sh -DTOPOTRAIN_BUILD_TESTS=OFF \
    >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
wait
if [[ -n $base_bench && ! -x $base_bench ]]; then
  note "BASE_REV $BASE_REV: its dflash_bench did not build ($(tail -1 "$OUT/base-build.log")); this tree only"
  base_bench=
fi
note "built (budget $budget tokens)${base_bench:+, and the dflash_bench of $BASE_REV}"
# shellcheck source=/dev/null
source launch/env.sh
# The drafter alone; with a base, twice on each side, alternating.
sides=(head)
[[ -n $base_bench ]] && sides=(head base head base)
if in_time "the drafter alone"; then
  for i in "${!sides[@]}"; do
    bench=$BUILD_DIR/bin/dflash_bench
    [[ ${sides[i]} == base ]] && bench=$base_bench
    timeout 90 "$bench" "$budget" 4096 512 6 sdpa >"$OUT/drafter-alone-$i-${sides[i]}.log" 2>&1
    note "the drafter alone (${sides[i]}): $(tail -1 "$OUT/drafter-alone-$i-${sides[i]}.log")"
  done
fi
if in_time "the drafter's profile"; then
  mkdir -p "$OUT/drafter-profile"
  timeout 90 "$BUILD_DIR/bin/dflash_bench" "$budget" 4096 512 2 sdpa "$OUT/drafter-profile" >"$OUT/drafter-profile.log" 2>&1
  note "drafter profile: $(find "$OUT/drafter-profile" -type f -printf "%f ")"
fi
# The chunk shape's trade (wasted scores against kernel calls), on this tree.
if in_time "the drafter's chunk shapes"; then
  timeout 120 "$BUILD_DIR/bin/dflash_bench" "$budget" 4096 512 6 "${DRAFTER_SHAPES:-sdpa,sdpa-b16,sdpa-m256,sdpa-b16-m256}" \
    >"$OUT/drafter-shapes.log" 2>&1
  grep '^attention' "$OUT/drafter-shapes.log" >>"$summary"
fi
if in_time "pipeline.sh 1t1d-one-gpu"; then
  OUT=$OUT/pipeline SKIP_BUILD=1 RUNS=1t1d-one-gpu STEPS_1T1D=30 REPORT_SKIP=5 ONE_GPU_QUEUE=2 ONE_GPU_BUDGET=$budget \
    RUN_TIMEOUT_S=150 timeout 160 bash bench/dflash/pipeline.sh >"$OUT/pipeline.log" 2>&1
  grep -E 'target stream|drafter done|tokens/s|one GPU shared' "$OUT/pipeline.log" >>"$summary"
fi
if in_time "target_forward.sh"; then
  OUT=$OUT/target-forward SKIP_BUILD=1 TOKENS=$budget timeout 150 bash bench/dflash/target_forward.sh \
    >"$OUT/target-forward.log" 2>&1
  tail -1 "$OUT/target-forward.log" >>"$summary"
fi
if in_time "the target's forward alone"; then
  MODEL_BENCH_FROZEN_TAPS=1,9,17,25,33 timeout 90 "$BUILD_DIR/bin/model_bench" qwen3-8b "$budget" 2048-6144 8 \
    >"$OUT/target-alone.log" 2>&1
  tail -1 "$OUT/target-alone.log" >>"$summary"
fi
note "dflash done"
