#!/usr/bin/env bash
# End-to-end checks of the run directory a launch claims (train/run_directory.h) on CPU ranks
# (tests/train/CMakeLists.txt runs each):
#   run_dir_e2e.sh BIN_DIR lock     two jobs in one run directory: the second (another seed) exits 2
#                                   on every rank naming the first (pid, host), writing nothing there,
#                                   --dry-run says the same with exit 0; the first finishes normally
#                                   and every checkpoint kept is its own (equal to a run alone); a job
#                                   killed with kill -9 leaves the lock to the next --resume auto,
#                                   which takes it over naming the dead pid; dflash_train alike
#   run_dir_e2e.sh BIN_DIR records  a run directory whose checkpoints are gone but whose records
#                                   remain (or whose `latest` names a missing file): --resume auto and
#                                   a launch without --resume exit 2 naming what was found and both
#                                   fixes, touching nothing; --resume fresh moves the records aside
#                                   and starts at step 0 with records of its own; every checkpoint
#                                   damaged: --resume auto stops with the same fixes
#   run_dir_e2e.sh BIN_DIR shape    `latest` a directory: exit 2 before step 1, naming it; a
#                                   checkpoint.dir under a regular file: exit 2 with the OS's reason
set -euo pipefail
bin=$1 scenario=$2
work=$(mktemp -d)
background=
trap '[[ -n $background ]] && kill -9 "$background" 2>/dev/null; rm -rf "$work"' EXIT
mpirun=(mpirun --oversubscribe --allow-run-as-root --bind-to none)
printf '[topology]\nname = "cpu2"\ninterconnect = "cpu"\n[[roles]]\nrole = "trainer"\nranks = [0, 1]\ndevices = "cpu"\n' \
  > "$work/cpu2.toml"
printf '[topology]\nname = "cpu-1t1d"\ninterconnect = "cpu"\n[[roles]]\nrole = "target"\nranks = [0]\ndevices = "cpu"
[[roles]]\nrole = "drafter"\nranks = [1]\ndevices = "cpu"\n' > "$work/cpu-1t1d.toml"
moe=("$bin/moe_train" "$work/cpu2.toml" --set model.preset=tiny-moe --set train.token_budget=256 --set log.every=1
     --set checkpoint.dir="$work")

# launch LOG EXPECTED ARGS...: mpirun -np 2 ARGS, output in LOG; fails unless it exits EXPECTED
launch() {
  local log=$1 expected=$2 code=0
  shift 2
  timeout 300 "${mpirun[@]}" -np 2 "$@" >"$log" 2>&1 || code=$?
  [[ $code -eq $expected ]] || { cat "$log"; echo "exit $code, expected $expected: $*"; exit 1; }
}

# has LOG TEXT...: LOG holds each fixed TEXT
has() {
  local log=$1 text
  shift
  for text in "$@"; do grep -qF -- "$text" "$log" || { cat "$log"; echo "$log lacks: $text"; exit 1; }; done
}

# wait_for PATH LOG: until PATH exists (120 s at most); else LOG, the background job's, shows why
wait_for() {
  for _ in $(seq 600); do [[ -e $1 ]] && return; sleep 0.2; done
  tail -40 "$2"
  echo "$1 never appeared (the background job's log: $2, its last lines above)"; exit 1
}

# holder RUN_DIR: the pid its lock file names
holder() { awk '/^pid: /{print $2}' "$1/.lock"; }

stop_background() {  # stop_background LOG: SIGUSR1 to the job started in the background, which must end with exit 0
  kill -USR1 "$background"
  local code=0
  wait "$background" || code=$?
  background=
  [[ $code -eq 0 ]] || { cat "$1"; echo "the job started in the background ($1) exited $code"; exit 1; }
}

case $scenario in
lock)
  # schedule = "tokens": the LR does not depend on max_steps, so a run stopped at step S equals
  # a run of max_steps = S.
  common=(--set train.schedule=tokens --set checkpoint.every_steps=5 --set checkpoint.keep=100)
  "${mpirun[@]}" -np 2 "${moe[@]}" --set checkpoint.run=shared "${common[@]}" --set train.max_steps=100000 \
    >"$work/first.log" 2>&1 &
  background=$!
  wait_for "$work/shared/step-00000005.h5" "$work/first.log"
  first=$(holder "$work/shared")
  [[ -n $first ]] || { cat "$work/shared/.lock"; echo "the lock file names no pid"; exit 1; }
  cp "$work/shared/log.txt" "$work/log-before.txt"
  launch "$work/second.log" 2 "${moe[@]}" --set checkpoint.run=shared "${common[@]}" --set train.seed=7 \
    --set train.max_steps=3
  refusal="run directory $work/shared is in use by another job: pid $first on host "
  has "$work/second.log" "$refusal" "give this launch another checkpoint.run" "--resume auto"
  [[ $(grep -cF "$refusal" "$work/second.log") -eq 1 ]] || { cat "$work/second.log"; echo "not one message"; exit 1; }
  grep -q "^\[rank [0-9]" "$work/second.log" && { cat "$work/second.log"; echo "a rank aborted"; exit 1; }
  # It wrote nothing there: log.txt has no line of it.
  grep -qF "in use by another job" "$work/shared/log.txt" && { echo "the refused job wrote log.txt"; exit 1; }
  [[ $(grep -c "moe_train launch" "$work/shared/log.txt") -eq 1 ]] || { cat "$work/shared/log.txt"; exit 1; }
  launch "$work/dry.log" 0 "${moe[@]}" --set checkpoint.run=shared --dry-run
  has "$work/dry.log" "warning: a launch now would be refused: $refusal"
  # The first job, stopped with a checkpoint, ends normally; every checkpoint is its own.
  stop_background "$work/first.log"
  [[ ! -s $work/shared/.lock ]] || { cat "$work/shared/.lock"; echo "the lock was not released in order"; exit 1; }
  stopped=$(grep -Eo 'stopped on request after step [0-9]+' "$work/first.log" | awk '{print $NF}')
  launch "$work/alone.log" 0 "${moe[@]}" --set checkpoint.run=alone "${common[@]}" --set train.max_steps="$stopped"
  compared=0
  for file in "$work"/shared/step-*.h5; do
    [[ -f $work/alone/${file##*/} ]] || continue
    "$bin/checkpoint_diff" "$file" "$work/alone/${file##*/}" 0 >/dev/null ||
      { echo "${file##*/} is not the first job's"; exit 1; }
    compared=$((compared + 1))
  done
  [[ -f $work/alone/$(cat "$work/shared/latest") && $compared -ge 2 ]] ||
    { ls "$work/shared" "$work/alone"; echo "too few checkpoints compared: $compared"; exit 1; }
  echo "$compared checkpoints of the shared run directory equal the first job's run alone"

  # kill -9 of the holder: the kernel releases the lock, its name stays in the file, and the
  # next --resume auto takes the directory over naming it.
  "${mpirun[@]}" -np 2 "${moe[@]}" --set checkpoint.run=shared "${common[@]}" --set train.max_steps=100000 \
    --resume auto >"$work/killed.log" 2>&1 &
  background=$!
  wait_for "$work/shared/step-$(printf '%08d' $(((stopped / 5 + 1) * 5))).h5" "$work/killed.log"
  killed=$(holder "$work/shared")
  [[ -n $killed && $killed != "$first" ]] || { cat "$work/shared/.lock"; echo "the lock does not name the new job"; exit 1; }
  kill -9 "$killed"
  timeout 120 tail --pid="$background" -f /dev/null || { echo "the killed job did not end"; exit 1; }
  wait "$background" || true
  background=
  [[ $(holder "$work/shared") == "$killed" ]] || { echo "the killed job's name left no trace in .lock"; exit 1; }
  steps=$(( $(sed -E 's/^step-0*([0-9]+)\.h5$/\1/' "$work/shared/latest") + 2 ))
  launch "$work/after.log" 0 "${moe[@]}" --set checkpoint.run=shared "${common[@]}" --set train.max_steps="$steps" \
    --resume auto
  has "$work/after.log" "warning: took over the run directory from pid $killed on host " \
    "which ended without releasing it (killed or aborted): pid $killed is gone" "done: $steps steps"

  # dflash_train: one lock for its run directory, though drafters and targets both write there.
  # The first job must still run, and its step-2 checkpoint still exist, when the second comes:
  # without keep and epochs it finished the demo set in seconds and pruned that checkpoint.
  dflash=("$bin/dflash_train" "$work/cpu-1t1d.toml" --set model.preset=tiny-dense --set model.draft_layers=1
          --set model.taps=1 --set model.block_size=4 --set train.anchors=8 --set train.token_budget=256 --set log.every=1
          --set checkpoint.dir="$work" --set checkpoint.run=dflash --set checkpoint.every_steps=2
          --set checkpoint.keep=100 --set train.epochs=1000)
  "${mpirun[@]}" -np 2 "${dflash[@]}" --set train.max_steps=100000 >"$work/dflash-first.log" 2>&1 &
  background=$!
  wait_for "$work/dflash/step-00000002.h5" "$work/dflash-first.log"
  first=$(holder "$work/dflash")
  launch "$work/dflash-second.log" 2 "${dflash[@]}" --set train.max_steps=3
  has "$work/dflash-second.log" "run directory $work/dflash is in use by another job: pid $first on host "
  stop_background "$work/dflash-first.log"
  ;;
records)
  common=(--set train.max_steps=4 --set checkpoint.every_steps=2)
  fixes=("--resume fresh, which moves those files into $work/run/superseded-after-step-00000000"
         "or launch under another checkpoint.run")
  launch "$work/first.log" 0 "${moe[@]}" --set checkpoint.run=run "${common[@]}"
  # Every checkpoint gone, `latest` too: records only.
  rm "$work"/run/step-*.h5 "$work/run/latest"
  md5sum "$work/run/log.txt" "$work/run/metrics.jsonl" "$work/run/timings.h5" >"$work/records.md5"
  found="$work/run holds the records of a run that trained up to step 4 (log.txt, metrics.jsonl (steps up to 4), "
  found+="timings.h5, settings.toml) but no complete checkpoint: "
  launch "$work/auto.log" 2 "${moe[@]}" --set checkpoint.run=run "${common[@]}" --resume auto
  has "$work/auto.log" "${found}--resume auto has no checkpoint to continue from" "${fixes[@]}"
  launch "$work/plain.log" 2 "${moe[@]}" --set checkpoint.run=run "${common[@]}"
  has "$work/plain.log" "${found}a launch without --resume would start a second run on top of them" "${fixes[@]}"
  md5sum -c --quiet "$work/records.md5" || { echo "a refused launch changed the records"; exit 1; }
  # --resume fresh: the records aside, a run of its own from step 0.
  launch "$work/fresh.log" 0 "${moe[@]}" --set checkpoint.run=run "${common[@]}" --resume fresh
  aside=$work/run/superseded-after-step-00000000
  has "$work/fresh.log" "warning: --resume fresh: moved the earlier run's 4 files and folders of $work/run" \
    "to $aside, where this run's cannot mix with them" "moe_train launch 1 of $work/run, fresh" "done: 4 steps"
  (cd "$work/run" && md5sum -c --quiet "$work/records.md5" 2>/dev/null) &&
    { echo "the old records are still in place"; exit 1; }
  (cd "$aside" && sed "s|$work/run/||" "$work/records.md5" | md5sum -c --quiet) ||
    { ls -R "$work/run"; echo "the old records were not moved aside intact"; exit 1; }
  /usr/bin/python3 - "$work/run/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [(m["step"], m["launch"]) for m in lines] == [(1, 1), (2, 1), (3, 1), (4, 1)], lines
PY
  [[ $(grep -c "moe_train launch" "$work/run/log.txt") -eq 1 ]] || { cat "$work/run/log.txt"; exit 1; }
  # `latest` naming a missing file: the same refusal, saying so.
  rm "$work"/run/step-*.h5
  launch "$work/missing.log" 2 "${moe[@]}" --set checkpoint.run=run "${common[@]}" --resume auto
  has "$work/missing.log" "but no complete checkpoint (\`latest\` names step-00000004.h5, which is missing)" \
    "${fixes[0]}-2"
  # Every checkpoint damaged: --resume auto stops too, with the same fixes; --resume fresh starts over.
  launch "$work/damaged.log" 0 "${moe[@]}" --set checkpoint.run=damaged "${common[@]}"
  for file in "$work"/damaged/step-*.h5; do python3 "$(dirname "$0")/flip_bytes.py" "$file"; done
  launch "$work/damaged.log" 2 "${moe[@]}" --set checkpoint.run=damaged "${common[@]}" --resume auto
  has "$work/damaged.log" "$work/damaged holds no older complete checkpoint to fall back to" \
    "or here with --resume fresh (which moves this run's files aside)"
  launch "$work/damaged.log" 0 "${moe[@]}" --set checkpoint.run=damaged "${common[@]}" --resume fresh
  has "$work/damaged.log" "--resume fresh: moved the earlier run's" "done: 4 steps"
  ;;
shape)
  launch "$work/first.log" 0 "${moe[@]}" --set checkpoint.run=run --set train.max_steps=2
  rm "$work/run/latest"
  mkdir "$work/run/latest"
  launch "$work/latest.log" 2 "${moe[@]}" --set checkpoint.run=run --set train.max_steps=12 --resume auto
  has "$work/latest.log" "$work/run/latest is a directory, where a run keeps the name of its newest checkpoint"
  grep -q "step 3 |" "$work/latest.log" && { cat "$work/latest.log"; echo "trained before refusing"; exit 1; }
  touch "$work/file"
  launch "$work/notdir.log" 2 "${moe[@]}" --set checkpoint.dir="$work/file/runs" --set checkpoint.run=run
  has "$work/notdir.log" "run directory $work/file/runs/run (checkpoint.dir/checkpoint.run) cannot be created: " \
    "is a file: Not a directory (ENOTDIR)" "Point checkpoint.dir at a directory this job can create and write"
  ;;
*)
  echo "unknown scenario $scenario"; exit 2
  ;;
esac
echo "run_dir $scenario: ok"
