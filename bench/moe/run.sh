#!/usr/bin/env bash
# moe_train against a PyTorch reference on a GPU machine (an H200; 1 or 2 GPUs).
#
#   bench/moe/run.sh            (from the project root; builds moe_train into build-gpu if needed)
#
# Every configuration trains moe-500m on a synthetic dataset (random tokens, documents of
# ~2K tokens) packed into micro-batches of 16384 tokens, first with moe_train, then with
# bench/moe/reference_train.py (transformers' Qwen3MoeForCausalLM, bf16 autocast, DDP with
# no_sync, fused AdamW), same samples in the same order:
#   1 GPU                       grad_accum 10 and 1
#   2 GPUs, NVLink (NCCL P2P)   grad_accum 10 and 1
#   2 GPUs, NCCL_P2P_DISABLE=1  grad_accum 10 and 1 (traffic through host memory: the PCIe case)
# grad_accum 10 runs STEPS_GA10 (10) steps and leaves out the first SKIP_GA10 (2); grad_accum 1
# runs STEPS_GA1 (30) and leaves out SKIP_GA1 (5); moe_train's last step (which writes the
# final checkpoint) is left out too. Then, if time is left, a short run of each with sample
# logging checks that both trained the same sample pieces on every rank.
#
# Prints one summary table (config | tok/s | reference tok/s | ratio | MFU | comm % | scaling
# efficiency = 2-GPU tok/s / (2 x 1-GPU tok/s)) and topotrain-report's phase breakdown for each
# moe_train run, to stdout and to "$OUT/moe_bench.md" when OUT is set ("$OUT/moe_bench_logs.txt"
# holds the tail of every log). A failed configuration is reported and the others go on. New
# runs stop starting once MOE_BENCH_BUDGET_S (380) seconds have passed; what was skipped says so.
# MOE_BENCH_SECTIONS (default "reference reference-shape users") chooses the parts: "reference"
# is the above; "reference-shape" compares the same way the HF Qwen3Moe reference shape (below),
# one GPU, grad_accum 1, both reading the config.json transformers writes, 110 steps measured
# from step 41; "users" (run first) is what users get: moe_train alone on 1 and 2 GPUs at
# grad_accum 1 and 10 with its defaults (checkpoint every 100 steps, progress every 10, clip 1),
# with checkpoint.every_steps = 10, and idealised (no checkpoint, clip or progress lines),
# interleaved in one sitting; and the HF Qwen3Moe
# reference shape (hidden 1024, 12 layers, 16 experts top-8 of 512; its config.json written
# with transformers) on ~4K-token documents, idealised and with the defaults, both 110 steps
# measured from step 41: cuDNN builds a plan for each new document-window size in the first
# tens of steps (docs/model.md), a one-time cost that shorter rows would mix into the rate;
# "one-gpu-goals" is the one-GPU speed goals' part of those (one call on a GPU machine): the
# users rows of one GPU at grad_accum 1 without every_steps = 10 (moe-500m and the reference
# shape, idealised and defaults) and the reference-shape row against transformers.
# Other knobs: NGPU (default: all GPUs, at most 2), TOKEN_BUDGET, RUN_TIMEOUT_S (150 per run),
# KEEP_WORK=1 (keep the work directory), SKIP_BUILD=1 (use $BUILD_DIR/bin as it is), PYTHON.
# MOE_BENCH_SMOKE=1 runs the same script on CPUs (2 ranks, tiny-moe, short runs): a check of
# the script itself on any machine, with no meaningful numbers.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
export BUILD_DIR=${BUILD_DIR:-$root/build-gpu}
export BUILD_TYPE=${BUILD_TYPE:-Release}
# shellcheck source=/dev/null
source launch/env.sh
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1

budget_s=${MOE_BENCH_BUDGET_S:-380}
run_timeout=${RUN_TIMEOUT_S:-150}
python=${PYTHON:-python3}
smoke=${MOE_BENCH_SMOKE:-0}
if [[ $smoke == 1 ]]; then
  preset=tiny-moe token_budget=${TOKEN_BUDGET:-1024} devices_kind=cpu
  data_args=(--tokens 200000 --mean-len 300 --vocab 512)
  reference_args=(--device cpu --tiny)
  mpirun_args=(--oversubscribe)
  steps_ga10=${STEPS_GA10:-4} skip_ga10=${SKIP_GA10:-1} steps_ga1=${STEPS_GA1:-6} skip_ga1=${SKIP_GA1:-2}
else
  preset=moe-500m token_budget=${TOKEN_BUDGET:-16384} devices_kind=gpu
  data_args=(--tokens 8000000 --mean-len 2048)
  reference_args=()
  mpirun_args=()
  steps_ga10=${STEPS_GA10:-10} skip_ga10=${SKIP_GA10:-2} steps_ga1=${STEPS_GA1:-30} skip_ga1=${SKIP_GA1:-5}
fi

say() { printf '[moe bench %4ds] %s\n' "$SECONDS" "$*"; }
die() { printf 'moe bench: error: %s\n' "$*" >&2; exit 1; }

command -v mpirun >/dev/null || die "mpirun not found (Open MPI is needed for moe_train and the reference)"
command -v "$python" >/dev/null || die "$python not found (set PYTHON)"
"$python" -c 'import numpy, h5py' 2>/dev/null || die "$python needs numpy and h5py (dataset and timings)"
"$python" -c 'import torch, transformers' 2>/dev/null ||
  say "warning: $python cannot import torch and transformers: every reference run will fail"

# ---- build (not counted in the time budget)
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  build_log=$(mktemp)
  if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
    say "configuring and building topotrain into $BUILD_DIR (tests off; first time takes minutes)"
    JOBS=${JOBS:-$(nproc --all)} launch/build.sh -DTOPOTRAIN_BUILD_TESTS=OFF >"$build_log" 2>&1 ||
      { tail -40 "$build_log"; die "build failed (log above)"; }
  fi
  cmake --build "$BUILD_DIR" --target moe_train topotrain_report -j "$(nproc --all)" >"$build_log" 2>&1 ||
    { tail -40 "$build_log"; die "building moe_train / topotrain-report in $BUILD_DIR failed (log above)"; }
  rm -f "$build_log"
fi
bin=$BUILD_DIR/bin
[[ -x $bin/moe_train && -x $bin/topotrain-report ]] || die "$bin/moe_train or $bin/topotrain-report missing after the build"

if [[ $smoke == 1 ]]; then
  gpus_present=0 ngpu=${NGPU:-2} hardware="CPU (smoke test)"
else
  gpus_present=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  ngpu=${NGPU:-$(( gpus_present > 2 ? 2 : gpus_present ))}
  (( ngpu >= 1 )) || die "no GPU found (nvidia-smi -L lists none); this benchmark needs a GPU machine"
  hardware="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$ngpu"
fi

# ---- work directory: /dev/shm when roomy (each moe_train run writes a ~6 GB final checkpoint)
shm_free_gb=$(df -BG --output=avail /dev/shm 2>/dev/null | tail -1 | tr -dc '0-9')
if [[ -n $shm_free_gb ]] && (( shm_free_gb >= 40 )); then
  work=$(mktemp -d /dev/shm/moe-bench.XXXXXX)
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/moe-bench.XXXXXX")
fi
[[ ${KEEP_WORK:-0} == 1 ]] || trap 'rm -rf "$work"' EXIT
results=$work/results
mkdir -p "$results" "$work/runs"
notes=$work/notes.md
reports=$work/reports.md
: >"$notes"
: >"$reports"
start=$SECONDS
say "work directory $work; $ngpu rank(s) on $hardware; time budget ${budget_s}s"

"$python" bench/moe/make_dataset.py "$work/data.h5" "${data_args[@]}" || die "writing the synthetic dataset failed"

write_topology() {  # NAME GPUS INTERCONNECT
  local ranks devices interconnect=$3
  ranks=$(seq -s, 0 $(( $2 - 1 )))
  devices="[$ranks]"
  [[ $devices_kind == cpu ]] && devices='"cpu"' interconnect=cpu
  printf '[topology]\nname = "%s"\ninterconnect = "%s"\n\n[[roles]]\nrole = "trainer"\nranks = [%s]\ndevices = %s\n' \
    "$1" "$interconnect" "$ranks" "$devices" >"$work/$1.toml"
}

port=29600
mpirun_base() {  # GPUS [NCCL_P2P_DISABLE value or empty]
  local cmd=(timeout -k 15 "$run_timeout" mpirun --allow-run-as-root --bind-to none "${mpirun_args[@]}" -np "$1"
             -x LD_LIBRARY_PATH -x OMP_NUM_THREADS -x NCCL_NVLS_ENABLE -x PYTHONUNBUFFERED -x PATH)
  [[ -n ${2:-} ]] && cmd+=(-x "NCCL_P2P_DISABLE=$2")
  printf '%s\n' "${cmd[@]}"
}

over_budget() { (( SECONDS - start > budget_s )); }

shape_args() {  # SHAPE WHO: moe_train's (WHO tt) or the reference's (ref) model and data; SHAPE preset|reference
  if [[ $1 == reference ]]; then
    # The HF Qwen3Moe reference shape on ~4K-token documents; both read the one config.json.
    if [[ ! -f $work/reference-shape/config.json ]]; then
      "$python" bench/moe/reference_shape.py "$work/reference-shape" >&2 || return 1
    fi
    if [[ ! -f $work/data4k.h5 ]]; then
      "$python" bench/moe/make_dataset.py "$work/data4k.h5" "${data_args[@]}" --mean-len 4096 >/dev/null || return 1
    fi
    if [[ $2 == tt ]]; then
      printf '%s\n' --set "model.config=$work/reference-shape/config.json" --set "data.path=$work/data4k.h5"
    else
      printf '%s\n' --config "$work/reference-shape/config.json" --data "$work/data4k.h5"
    fi
  elif [[ $2 == tt ]]; then
    printf '%s\n' --set "model.preset=$preset" --set "data.path=$work/data.h5"
  else
    printf '%s\n' --data "$work/data.h5"
  fi
}

run_topotrain() {  # NAME GPUS GA STEPS SKIP P2P_DISABLE SHAPE [extra --set ...]
  local name=$1 gpus=$2 ga=$3 steps=$4 skip=$5 p2p=$6 shape=$7
  shift 7
  local log=$work/$name.tt.log run_dir=$work/runs/$name-tt
  local -a launch model
  mapfile -t launch < <(mpirun_base "$gpus" "$p2p")
  mapfile -t model < <(shape_args "$shape" tt 2>"$log")
  (( ${#model[@]} )) || return 1
  say "$name: moe_train ($gpus GPU(s), grad_accum $ga, $steps steps, $shape shape)"
  "${launch[@]}" "$bin/moe_train" "$work/$name.toml" "${model[@]}" --set "train.token_budget=$token_budget" \
    --set "train.grad_accum=$ga" --set "train.max_steps=$steps" --set train.lr=6e-4 \
    --set "checkpoint.dir=$work/runs" --set "checkpoint.run=$name-tt" --set checkpoint.every_steps=0 \
    --set checkpoint.keep=1 --set log.every=5 "$@" >"$log" 2>&1
  local rc=$?
  rm -f "$run_dir"/step-*.h5
  return $rc
}

run_reference() {  # NAME GPUS GA STEPS SKIP P2P_DISABLE SHAPE [extra args]
  local name=$1 gpus=$2 ga=$3 steps=$4 skip=$5 p2p=$6 shape=$7
  shift 7
  local -a launch model
  mapfile -t launch < <(mpirun_base "$gpus" "$p2p")
  mapfile -t model < <(shape_args "$shape" ref 2>"$work/$name.ref.log")
  (( ${#model[@]} )) || return 1
  port=$(( port + 1 ))
  say "$name: PyTorch reference ($gpus GPU(s), grad_accum $ga, $steps steps, $shape shape)"
  "${launch[@]}" -x "MASTER_PORT=$port" "$python" bench/moe/reference_train.py "${model[@]}" \
    --token-budget "$token_budget" --grad-accum "$ga" --steps "$steps" --warmup "$skip" --lr 6e-4 \
    "${reference_args[@]}" "$@" \
    >"$work/$name.ref.log" 2>&1
}

log_tail() {  # LOG LINES: the end of a log without mpirun's abort banner
  grep -v -E '^-{20,}$|^(Primary job|a non-zero exit code|mpirun (detected|noticed)|the job to be terminated|  Process name|  Exit code|process rank|Node:|exited on signal)' "$1" 2>/dev/null |
    tail -"$2"
}

failed() {  # NAME WHAT LOG
  say "$1: $2 FAILED (log tail below)"
  log_tail "$3" 25
  { echo "- **$1: $2 failed** — last lines of its log:"; echo '```'; log_tail "$3" 15; echo '```'; } >>"$notes"
}

order=0
bench_config() {  # NAME LABEL GPUS GA INTERCONNECT P2P_DISABLE [SHAPE STEPS SKIP]
  local name=$1 label=$2 gpus=$3 ga=$4 interconnect=$5 p2p=$6 shape=${7:-preset} steps skip
  order=$(( order + 1 ))
  if (( ga == 1 )); then steps=$steps_ga1 skip=$skip_ga1; else steps=$steps_ga10 skip=$skip_ga10; fi
  steps=${8:-$steps} skip=${9:-$skip}
  printf '{"name": "%s", "label": "%s", "gpus": %d, "grad_accum": %d, "order": %d}\n' \
    "$name" "$label" "$gpus" "$ga" "$order" >"$results/$name.config.json"
  if (( gpus > ngpu )); then
    echo "- $label: skipped, needs $gpus GPUs ($ngpu available)" >>"$notes"
    return
  fi
  write_topology "$name" "$gpus" "$interconnect"
  if over_budget; then
    say "$name: skipped (time budget of ${budget_s}s spent)"
    echo "- $label: skipped, time budget of ${budget_s}s spent (raise MOE_BENCH_BUDGET_S)" >>"$notes"
    return
  fi
  if run_topotrain "$name" "$gpus" "$ga" "$steps" "$skip" "$p2p" "$shape"; then
    local run_dir=$work/runs/$name-tt
    if "$python" bench/moe/summarize.py timings "$run_dir" --skip "$skip" >"$results/$name.tt.json" 2>"$work/$name.sum.log"; then
      { echo "### $label: topotrain-report --skip $skip"; echo '```'
        "$bin/topotrain-report" "$run_dir" --skip "$skip" 2>&1
        grep -E '^.*step [0-9]+ \|' "$work/$name.tt.log" | tail -3
        echo '```'; } >>"$reports"
    else
      rm -f "$results/$name.tt.json"
      failed "$name" "reading moe_train's timings" "$work/$name.sum.log"
    fi
  else
    failed "$name" "moe_train" "$work/$name.tt.log"
  fi
  if run_reference "$name" "$gpus" "$ga" "$steps" "$skip" "$p2p" "$shape" --result "$results/$name.ref.json" &&
     [[ -s $results/$name.ref.json ]]; then
    { echo "### $label: reference"; echo '```'; grep -E '^(reference:|step |RESULT)' "$work/$name.ref.log" | tail -4
      echo '```'; } >>"$reports"
  else
    rm -f "$results/$name.ref.json"
    failed "$name" "reference" "$work/$name.ref.log"
  fi
}

# ---- what users get: moe_train alone, its defaults beside the idealised run, interleaved
users=$work/users
mkdir -p "$users"
user_order=0
user_row() {  # NAME LABEL GPUS GA STEPS SKIP SHAPE KIND: SHAPE preset|reference, KIND idealised|defaults|every10
  local name=$1 label=$2 gpus=$3 ga=$4 steps=$5 skip=$6 shape=$7 kind=$8
  local -a settings=(--set "train.grad_accum=$ga" --set "train.max_steps=$steps" --set train.lr=6e-4
                     --set "checkpoint.dir=$work/runs" --set "checkpoint.run=$name")
  user_order=$(( user_order + 1 ))
  if (( gpus > ngpu )); then echo "- $label: skipped, needs $gpus GPUs ($ngpu available)" >>"$notes"; return; fi
  if over_budget; then echo "- $label: skipped, time budget of ${budget_s}s spent" >>"$notes"; return; fi
  local -a model
  mapfile -t model < <(shape_args "$shape" tt 2>"$work/$name.user.log")
  if (( ! ${#model[@]} )); then failed "$name" "writing the $shape shape's config or data" "$work/$name.user.log"; return; fi
  settings+=("${model[@]}")
  case $kind in
    idealised) settings+=(--set checkpoint.every_steps=-1 --set train.clip=0 --set log.every=100000) ;;
    every10) settings+=(--set checkpoint.every_steps=10) ;;
    defaults) ;;
  esac
  write_topology "$name" "$gpus" nvlink
  local -a launch
  mapfile -t launch < <(mpirun_base "$gpus" "")
  say "$name: moe_train $kind ($gpus GPU(s), grad_accum $ga, $steps steps, $shape shape)"
  if "${launch[@]}" "$bin/moe_train" "$work/$name.toml" --set "train.token_budget=$token_budget" "${settings[@]}" \
       >"$work/$name.user.log" 2>&1 &&
     "$python" bench/moe/summarize.py timings "$work/runs/$name" --skip "$skip" >"$users/$name.json" 2>"$work/$name.sum.log"; then
    printf '{"name": "%s", "label": "%s", "group": "%s", "kind": "%s", "order": %d}\n' "$name" "$label" \
      "$gpus-$ga-$shape" "$kind" "$user_order" >"$users/$name.config.json"
    { echo "### $label: topotrain-report --skip $skip"; echo '```'
      "$bin/topotrain-report" "$work/runs/$name" --skip "$skip" 2>&1 | head -40
      # Step by step against its group's idealised row (run first): which steps the defaults lose time in.
      local ideal=${name%-*}-ideal
      if [[ $kind != idealised && -f $work/runs/$ideal/timings.h5 ]]; then
        "$bin/topotrain-report" "$work/runs/$name" --skip "$skip" --compare "$work/runs/$ideal" 2>&1 |
          sed -n '/^against /,$p'
      fi
      grep -E 'checkpoint (snapshots|of step|.* written)' "$work/$name.user.log" | sed 's/^.*\] //' | tail -4
      echo '```'; } >>"$reports"
  else
    rm -f "$users/$name.json"
    failed "$name" "moe_train ($kind)" "$work/$name.user.log"
  fi
  rm -f "$work/runs/$name"/step-*.h5
}

[[ $smoke == 1 ]] && ga1_long=12 || ga1_long=110  # a defaults run at grad_accum 1 crosses the cadence of 100
preset_user_rows() {  # GPUS GA [KINDS]: moe-500m rows of those kinds (default: idealised defaults every10)
  local gpus=$1 ga=$2 kind steps long skip
  if (( ga == 1 )); then steps=$steps_ga1 long=$ga1_long skip=$skip_ga1; else steps=$steps_ga10 long=$steps_ga10 skip=$skip_ga10; fi
  for kind in ${3:-idealised defaults every10}; do
    case $kind in
      idealised) user_row "u$gpus-ga$ga-ideal" "$gpus GPU(s), grad_accum $ga, idealised" "$gpus" "$ga" "$steps" "$skip" preset idealised ;;
      defaults) user_row "u$gpus-ga$ga-defaults" "$gpus GPU(s), grad_accum $ga, defaults" "$gpus" "$ga" "$long" "$skip" preset defaults ;;
      every10) user_row "u$gpus-ga$ga-every10" "$gpus GPU(s), grad_accum $ga, checkpoint.every_steps = 10" "$gpus" "$ga" \
                 $(( ga == 1 ? steps : steps + 12 )) "$skip" preset every10 ;;
    esac
  done
}
reference_shape_user_rows() {
  [[ $smoke == 1 ]] && return  # the reference shape is a 489M model: not for CPU ranks
  user_row "u1-ref-ideal" "1 GPU, HF Qwen3Moe reference shape, grad_accum 1, idealised" 1 1 110 40 reference idealised
  user_row "u1-ref-defaults" "1 GPU, HF Qwen3Moe reference shape, grad_accum 1, defaults" 1 1 110 40 reference defaults
}
users_section() {
  for gpus in 1 2; do
    preset_user_rows "$gpus" 1
    preset_user_rows "$gpus" 10
  done
  reference_shape_user_rows
}
reference_shape_section() {
  [[ $smoke == 1 ]] && return  # a 489M model: not for CPU ranks
  # 110 steps measured from step 41, as the users section's reference-shape rows (cuDNN's plans).
  bench_config 1gpu-ref-ga1 "1 GPU, HF Qwen3Moe reference shape, grad_accum 1" 1 1 nvlink "" reference 110 40
}

sections=${MOE_BENCH_SECTIONS:-reference reference-shape users}
for section in $sections; do
  [[ $section =~ ^(reference|reference-shape|users|one-gpu-goals)$ ]] ||
    die "MOE_BENCH_SECTIONS: unknown section '$section' (reference, reference-shape, users, one-gpu-goals)"
done
[[ " $sections " == *" users "* ]] && users_section
if [[ " $sections " == *" one-gpu-goals "* ]]; then
  # The one-GPU goals' rows, grad_accum 1 (users' rows of one GPU without every10, then the
  # reference shape against transformers): moe-500m and the reference shape with the defaults
  # beside idealised.
  if [[ " $sections " != *" users "* ]]; then
    preset_user_rows 1 1 "idealised defaults"
    reference_shape_user_rows
  fi
  [[ " $sections " == *" reference-shape "* ]] || reference_shape_section
fi
if [[ " $sections " == *" reference "* ]]; then
bench_config 1gpu-ga10 "1 GPU, grad_accum 10" 1 10 nvlink ""
bench_config 2gpu-nvlink-ga10 "2 GPUs NVLink, grad_accum 10" 2 10 nvlink ""
bench_config 2gpu-p2poff-ga10 "2 GPUs NCCL_P2P_DISABLE=1, grad_accum 10" 2 10 pcie4 1
bench_config 1gpu-ga1 "1 GPU, grad_accum 1" 1 1 nvlink ""
bench_config 2gpu-nvlink-ga1 "2 GPUs NVLink, grad_accum 1" 2 1 nvlink ""
bench_config 2gpu-p2poff-ga1 "2 GPUs NCCL_P2P_DISABLE=1, grad_accum 1" 2 1 pcie4 1
fi
[[ " $sections " == *" reference-shape "* ]] && reference_shape_section

# ---- same samples? moe_train's log.samples against the reference's --sample-log
check_gpus=$ngpu
data_check="not run (time budget spent, or the reference section left out)"
if [[ " $sections " == *" reference "* ]] && ! over_budget; then
  write_topology order-check "$check_gpus" nvlink
  mkdir -p "$work/ref-samples"
  if run_topotrain order-check "$check_gpus" 2 3 0 "" preset --set log.samples=true &&
     run_reference order-check "$check_gpus" 2 3 0 "" preset --sample-log "$work/ref-samples"; then
    data_check="identical: every rank trained the same sample pieces in the same order ($check_gpus rank(s), grad_accum 2, 3 steps)"
    for (( r = 0; r < check_gpus; r++ )); do
      if ! diff -q "$work/runs/order-check-tt/samples-rank-$r.txt" "$work/ref-samples/samples-rank-$r.txt" >/dev/null 2>&1; then
        data_check="DIFFERENT on rank $r: $(diff "$work/runs/order-check-tt/samples-rank-$r.txt" "$work/ref-samples/samples-rank-$r.txt" 2>&1 | head -3 | tr '\n' ' ')"
        break
      fi
    done
  else
    data_check="check failed to run (order-check logs below)"
    for f in "$work"/order-check.*.log; do { echo "- $(basename "$f"):"; echo '```'; log_tail "$f" 10; echo '```'; } >>"$notes"; done
  fi
fi

# ---- summary
summary=$work/moe_bench.md
{
  shapes_run=$preset
  [[ " $sections " == *" reference-shape "* || " $sections " == *" one-gpu-goals "* ]] && [[ $smoke != 1 ]] &&
    shapes_run+=" and the HF Qwen3Moe reference shape"
  echo "# moe_train vs PyTorch reference: $shapes_run, token_budget $token_budget"
  echo
  echo "$(date -u '+%F %H:%M UTC'), $hardware, commit $(git describe --always --dirty 2>/dev/null || echo '?')," \
       "$("$python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>/dev/null)"
  echo
  "$python" bench/moe/summarize.py table "$results" || echo "(summary table failed)"
  echo
  echo "## What users get (moe_train alone, same sitting)"
  echo
  "$python" bench/moe/summarize.py users "$users" || echo "(users table failed)"
  echo
  echo "idealised: checkpoint.every_steps = -1, train.clip = 0, no progress lines; defaults: nothing overridden"
  echo "(checkpoint every 100 steps, progress every 10, clip 1; at grad_accum 1 the run crosses step 100);"
  echo "vs idealised: tok/s over the idealised row of the same GPUs, grad_accum and shape;"
  echo "stall: the largest checkpoint phase of a measured step (what the training waited: the host for a"
  echo "snapshot, the device before the next update for its copy)."
  echo
  echo "tok/s: global tokens per second over the measured steps (per GPU in brackets); ratio = topotrain / reference;"
  echo "MFU with topotrain's FLOPs per token (active matmuls + attention at each token's mean causal context) and 989 TFLOP/s;"
  echo "comm % = moe_train's comm_wait share of the step; scaling eff. = 2-GPU tok/s / (2 x 1-GPU tok/s), same grad_accum."
  echo "expert load: moe_train's peak expert load over the measured steps (1 = even split, experts / top_k = every"
  echo "token to the same experts; the experts' weight-gradient GEMMs slow down as it rises); the reference's is"
  echo "the same figure for its last micro-batch."
  echo "ga10: steps $((skip_ga10 + 1))..$((steps_ga10 - 1)) of $steps_ga10 measured; ga1: steps $((skip_ga1 + 1))..$((steps_ga1 - 1)) of $steps_ga1" \
       "(the reference measures through its last step)."
  echo
  echo "Data order check: $data_check"
  if [[ -s $notes ]]; then echo; echo "## Skipped or failed"; cat "$notes"; fi
  echo
  echo "## Phase breakdown per run"
  echo "(topotrain-report's tokens/s and MFU lines sum the global token count over ranks: on 2 GPUs they read 2x;"
  echo "the table above is computed from the same timings.h5 without that double count.)"
  echo
  cat "$reports"
  echo
  echo "bench/moe/run.sh finished in $((SECONDS - start))s after the build."
} >"$summary"
echo
cat "$summary"
if [[ -n ${OUT:-} ]]; then
  mkdir -p "$OUT"
  cp "$summary" "$OUT/moe_bench.md"
  for f in "$work"/*.log; do echo "===== $(basename "$f")"; tail -60 "$f"; done >"$OUT/moe_bench_logs.txt" 2>/dev/null
  echo "written: $OUT/moe_bench.md, $OUT/moe_bench_logs.txt"
fi
