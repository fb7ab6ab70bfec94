#!/usr/bin/env bash
# Liveness of the trainers on CPU ranks (tests/train/CMakeLists.txt runs each scenario):
#   liveness_e2e.sh BIN_DIR moe_hang     np 3 moe_train, rank 1 stops itself (SIGSTOP) at step 4: the
#                                        waiting ranks use little CPU, and after train.hang_timeout_s
#                                        every rank ends with exit 5 and one message naming rank 1
#                                        and step 4; then the same with rank 0 (the monitor) stopped
#   liveness_e2e.sh BIN_DIR dflash_hang  2 targets -> 2 drafters, drafter rank 3 stops at step 3:
#                                        exit 5, one message naming rank 3 (drafter) and step 3;
#                                        then target rank 1 stops: its drafter names it
#   liveness_e2e.sh BIN_DIR moe_stop     np 4 moe_train on cpu4: a trainer stopped inside the step's
#                                        collective, where every rank has entered it, is named by
#                                        its process state (rank 2, then the monitor, rank 0); then
#                                        REPEAT times rank 2 is stopped from outside at a random
#                                        moment after step 5, and is named every time
#   liveness_e2e.sh BIN_DIR dflash_lone_drafter   a drafter with no drafter peer (cpu-7t1d, cpu-1t1d
#                                        in turn, REPEAT runs) stopped from outside after step 3:
#                                        its targets, blocked on its full queue, name it after a
#                                        slow step's allowance (63 s at train.hang_timeout_s = 3)
#   liveness_e2e.sh BIN_DIR moe_kill     np 3 moe_train, kill -9 of rank 1 mid-run: topotrain itself
#                                        prints "rank 1 (trainer) died or left; stopping" (one line,
#                                        no other rank named), and the job ends within seconds
#   liveness_e2e.sh BIN_DIR dflash_kill_drafter   the same for dflash_train on cpu-7t1d, kill -9
#                                        of the drafter (rank 7): the targets torn down after it,
#                                        which leave in any order, are never named
#   liveness_e2e.sh BIN_DIR dflash_kill_target    the same, kill -9 of target rank 3
# The kill and outside-stop scenarios repeat their run REPEAT times (default 3; REPEAT=10 for the
# release check), since a wrong name shows in some runs only: it depends on which rank the
# scheduler lets leave first, or where in its step a rank is stopped.
set -euo pipefail
bin=$1 scenario=$2
work=$(mktemp -d)
launcher=
trap '[[ -n $launcher ]] && kill -9 "$launcher" 2>/dev/null; rm -rf "$work"' EXIT
mpirun=(mpirun --oversubscribe --allow-run-as-root --bind-to none)
printf '[topology]\nname = "cpu3"\ninterconnect = "cpu"\n[[roles]]\nrole = "trainer"\nranks = [0, 1, 2]\ndevices = "cpu"\n' \
  > "$work/cpu3.toml"

start() {  # start LOG ARGS...: runs mpirun ARGS in the background, output in LOG
  local log=$1
  shift
  export TOPOTRAIN_LIVENESS_RUN=$log  # marks this run's ranks, to find them by rank
  "${mpirun[@]}" "$@" >"$log" 2>&1 &
  launcher=$!
}

pid_of_rank() {  # pid_of_rank N:NAME: the pid of world rank N (a NAME process) of the last run started
  local pid environment
  for _ in $(seq 300); do
    for pid in $(pgrep -x "${1#*:}" 2>/dev/null); do
      environment=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ") || continue
      grep -qx "TOPOTRAIN_LIVENESS_RUN=$TOPOTRAIN_LIVENESS_RUN" <<<"$environment" &&
        grep -qx "OMPI_COMM_WORLD_RANK=${1%%:*}" <<<"$environment" && { echo "$pid"; return; }
    done
    sleep 0.2
  done
  echo "no process of rank $1" >&2
  return 1
}

wait_stopped() {  # wait_stopped PID: until the process is in state T (SIGSTOP)
  for _ in $(seq 600); do
    [[ $(awk '{sub(/.*\) /, ""); print $1}' "/proc/$1/stat" 2>/dev/null) == T ]] && return
    sleep 0.1
  done
  echo "process $1 never stopped itself" >&2
  return 1
}

cpu_ticks() {  # cpu_ticks PID: utime + stime, in clock ticks
  awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$1/stat"
}

# finish LOG LIMIT EXPECTED_CODE: the job ends within LIMIT s with EXPECTED_CODE ("nonzero": any but 0)
finish() {
  local log=$1 limit=$2 expected=$3 code=0
  timeout "$limit" tail --pid="$launcher" -f /dev/null || { cat "$log"; echo "the job did not end within $limit s"; exit 1; }
  wait "$launcher" || code=$?
  launcher=
  if [[ $expected == nonzero ]]; then
    [[ $code -ne 0 ]] || { cat "$log"; echo "exit 0, expected a failure"; exit 1; }
  else
    [[ $code -eq $expected ]] || { cat "$log"; echo "exit $code, expected $expected"; exit 1; }
  fi
}

# one_line LOG REGEX: exactly one line of LOG matches
one_line() {
  local n
  n=$(grep -Ec "$2" "$1" || true)
  [[ $n -eq 1 ]] || { cat "$1"; echo "expected one line matching '$2', found $n"; exit 1; }
}

# kill_named LOG BIN NAME VICTIM ROLE MPIRUN_ARGS...: starts the job, kills world rank VICTIM
# (ROLE) with SIGKILL after step 3, and checks that the job ends within seconds with exactly
# one "died or left" line, which names VICTIM and no other rank, written by a surviving rank.
kill_named() {
  local log=$1 name=$2 victim=$3 role=$4
  shift 4
  start "$log" "$@"
  local pid
  pid=$(pid_of_rank "$victim:$name")
  for _ in $(seq 600); do grep -qs "step 3 |" "$log" && break; sleep 0.1; done
  kill -9 "$pid"
  # mpirun's own status is the first failed process's: 128 + 9 for the killed one (README, "Exit
  # codes"), though the survivors exit 1 after naming it.
  finish "$log" 30 137
  grep -q '^| 137 | what `mpirun` itself returns when a rank was killed by SIGKILL' README.md ||
    { echo "README's exit-code table does not give mpirun's 137"; exit 1; }
  one_line "$log" 'died or left'
  # Not anchored to the line's start: mpirun forwards each rank's output in chunks of at most a
  # few KiB, so under load another rank's long progress line may be cut around it.
  one_line "$log" "\\[rank [0-9]+ [a-z]+\\] rank $victim \\($role\\) died or left; stopping"
  grep -E 'died or left' "$log"
}
repeat=${REPEAT:-3}

# stop_named LOG NAME VICTIM ROLE AFTER_STEP LIMIT MESSAGE MPIRUN_ARGS...: starts the job, stops
# world rank VICTIM (ROLE) with SIGSTOP from outside at a random moment after step AFTER_STEP,
# and checks that the job ends with exit 5 within LIMIT s, one "made no progress" line, and
# that it matches MESSAGE (naming VICTIM).
stop_named() {
  local log=$1 name=$2 victim=$3 role=$4 after=$5 limit=$6 message=$7
  shift 7
  start "$log" "$@"
  local pid
  pid=$(pid_of_rank "$victim:$name")
  for _ in $(seq 900); do grep -qs "step $after |" "$log" && break; sleep 0.1; done
  sleep "0.$((RANDOM % 10))"
  kill -STOP "$pid"
  local stopped_at=$SECONDS
  finish "$log" "$limit" 5
  one_line "$log" 'made no progress'
  one_line "$log" "$message"
  echo "named after $((SECONDS - stopped_at)) s: $(grep -E 'made no progress' "$log")"
}

moe=(--set model.preset=tiny-moe --set train.token_budget=256 --set log.every=1 --set train.max_steps=100000
     --set checkpoint.every_steps=-1 --set checkpoint.dir="$work")

case $scenario in
moe_hang)
  TOPOTRAIN_FAULT_STALL=1:4 start "$work/hang.log" -np 3 "$bin/moe_train" "$work/cpu3.toml" "${moe[@]}" \
    --set checkpoint.run=hang --set train.hang_timeout_s=8
  stalled=$(pid_of_rank 1:moe_train)
  waiting=("$(pid_of_rank 0:moe_train)" "$(pid_of_rank 2:moe_train)")
  wait_stopped "$stalled"
  sleep 1
  # While rank 1 is stopped the others wait. A rank that spins gets as much CPU as a busy
  # loop running alongside (on a loaded machine both get little), so the waiting ranks'
  # CPU time is compared with such a loop's as well as with the wall time.
  bash -c 'while :; do :; done' &
  spinner=$!
  ticks=("$(cpu_ticks "${waiting[0]}")" "$(cpu_ticks "${waiting[1]}")" "$(cpu_ticks "$spinner")")
  t0=$(date +%s.%N)
  sleep 2
  ticks+=("$(cpu_ticks "${waiting[0]}")" "$(cpu_ticks "${waiting[1]}")" "$(cpu_ticks "$spinner")")
  t1=$(date +%s.%N)
  kill "$spinner"
  hz=$(getconf CLK_TCK)
  spun=$((ticks[5] - ticks[2]))
  echo "a busy loop alongside: $((100 * spun / hz)) cs of CPU in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
  for i in 0 1; do
    used=$((ticks[i + 3] - ticks[i]))
    share=$(awk -v u="$used" -v t0="$t0" -v t1="$t1" -v hz="$hz" 'BEGIN { printf "%d", 100 * u / hz / (t1 - t0) }')
    echo "waiting rank pid ${waiting[$i]}: ${share}% of a core, $((100 * used / hz)) cs of CPU"
    (( share < 30 )) || { echo "a waiting rank burns ${share}% of a core"; exit 1; }
    (( spun >= 10 )) || { echo "the busy loop got too little CPU to compare with"; exit 1; }
    (( 10 * used < 3 * spun )) || { echo "a waiting rank used ${used} ticks, the busy loop ${spun}: it spins"; exit 1; }
  done
  finish "$work/hang.log" 60 5
  one_line "$work/hang.log" 'made no progress'
  one_line "$work/hang.log" '\[rank 0 trainer\] step 4 made no progress for [0-9]+ s \(allowance 8 s; train.hang_timeout_s = 8\): rank 1 \(trainer\) \(process stopped\) did not arrive; stopping every rank'
  # The monitor itself stopped: another rank names it, after the allowance and a grace.
  TOPOTRAIN_FAULT_STALL=0:3 start "$work/hang0.log" -np 3 "$bin/moe_train" "$work/cpu3.toml" "${moe[@]}" \
    --set checkpoint.run=hang0 --set train.hang_timeout_s=3
  wait_stopped "$(pid_of_rank 0:moe_train)"
  finish "$work/hang0.log" 60 5
  one_line "$work/hang0.log" 'made no progress'
  one_line "$work/hang0.log" '\[rank [12] trainer\] step 3 made no progress for [0-9]+ s .*: rank 0 \(trainer\) \(process stopped\) did not arrive'
  ;;
dflash_hang)
  TOPOTRAIN_FAULT_STALL=3:3 start "$work/dflash.log" -np 4 "$bin/dflash_train" topology/cpu-2t2d.toml \
    --set checkpoint.dir="$work" --set log.every=1 --set train.hang_timeout_s=3
  wait_stopped "$(pid_of_rank 3:dflash_train)"
  finish "$work/dflash.log" 60 5
  one_line "$work/dflash.log" 'made no progress'
  one_line "$work/dflash.log" '\[rank 2 drafter\] step 3 made no progress for [0-9]+ s .*: rank 3 \(drafter\) \(process stopped\) did not arrive'
  # A stalled target: its drafter names it (not itself, as the other drafter would).
  TOPOTRAIN_FAULT_STALL=1:3 start "$work/target.log" -np 4 "$bin/dflash_train" topology/cpu-2t2d.toml \
    --set checkpoint.dir="$work" --set checkpoint.run=target --set log.every=1 --set train.hang_timeout_s=3
  wait_stopped "$(pid_of_rank 1:dflash_train)"
  finish "$work/target.log" 60 5
  one_line "$work/target.log" 'made no progress'
  one_line "$work/target.log" '\[rank 3 drafter\] step [0-9]+ made no progress for [0-9]+ s .*: nothing arrived from rank 1 \(target\) \(process stopped\)'
  ;;
moe_stop)
  # Stopped inside the collective, after the group learnt that it entered: positions alone
  # cannot name it (every rank arrived); its process state does. Rank 2, named by the monitor;
  # then the monitor, named by the next rank.
  for case in 2:6:0 0:4:1; do
    IFS=: read -r victim step reporter <<<"$case"
    TOPOTRAIN_FAULT_STALL_IN_COLLECTIVE=$victim:$step start "$work/inside$victim.log" -np 4 "$bin/moe_train" \
      topology/cpu4.toml "${moe[@]}" --set checkpoint.run="inside$victim" --set train.hang_timeout_s=3
    wait_stopped "$(pid_of_rank "$victim:moe_train")"
    finish "$work/inside$victim.log" 60 5
    one_line "$work/inside$victim.log" 'made no progress'
    one_line "$work/inside$victim.log" "\\[rank $reporter trainer\\] step $step made no progress for [0-9]+ s \\(allowance 3 s; train.hang_timeout_s = 3\\): rank $victim \\(trainer\\) \\(process stopped\\) did not complete the collective; stopping every rank"
  done
  for run in $(seq "$repeat"); do
    stop_named "$work/stop$run.log" moe_train 2 trainer 5 60 \
      '\[rank [013] trainer\] step [0-9]+ made no progress for [0-9]+ s .*: rank 2 \(trainer\) \(process stopped\) did not (arrive|complete the collective); stopping every rank' \
      -np 4 "$bin/moe_train" topology/cpu4.toml "${moe[@]}" --set checkpoint.run="stop$run" --set train.hang_timeout_s=3
  done
  ;;
dflash_lone_drafter)
  for run in $(seq "$repeat"); do
    topology=cpu-7t1d np=8
    (( run % 2 == 0 )) && topology=cpu-1t1d np=2
    drafter=$((np - 1))
    # 63 s: a slow step's allowance (twice train.hang_timeout_s, and at least a minute more),
    # then up to 0.2 s to notice, on a loaded machine a few seconds more.
    stop_named "$work/lone$run.log" dflash_train "$drafter" drafter 3 100 \
      "\\[rank [0-9]+ target\\] made no progress for 6[3-9] s \\(allowance 63 s, a slow step's; train.hang_timeout_s = 3\\): rank $drafter \\(drafter\\) \\(process stopped\\) did not answer; stopping every rank" \
      -np "$np" "$bin/dflash_train" "topology/$topology.toml" --set checkpoint.dir="$work" \
      --set checkpoint.run="lone$run" --set log.every=1 --set train.max_steps=100000 --set train.hang_timeout_s=3
  done
  ;;
moe_kill)
  for run in $(seq "$repeat"); do
    kill_named "$work/kill$run.log" moe_train 1 trainer -np 3 "$bin/moe_train" "$work/cpu3.toml" "${moe[@]}" \
      --set checkpoint.run="kill$run"
  done
  ;;
dflash_kill_drafter | dflash_kill_target)
  victim=7 role=drafter
  [[ $scenario == dflash_kill_target ]] && victim=3 role=target
  for run in $(seq "$repeat"); do
    kill_named "$work/kill$run.log" dflash_train "$victim" "$role" -np 8 "$bin/dflash_train" topology/cpu-7t1d.toml \
      --set checkpoint.dir="$work" --set checkpoint.run="kill$run" --set log.every=1 --set train.max_steps=100000
  done
  ;;
*) echo "unknown scenario $scenario"; exit 2 ;;
esac
echo "PASS $scenario"
