#!/usr/bin/env bash
# End-to-end checks of dflash_train on CPU ranks (tests/train/CMakeLists.txt runs each) over
# a small dataset (33 paragraphs, 11325 byte tokens), trained to the end of its epoch:
#   dflash_train_e2e.sh BIN_DIR fanin    7 targets -> 1 drafter: the drafter trains every batch the
#                                        targets sent exactly once, and together they cover every
#                                        token of the epoch exactly once; the report names a stage
#                                        and counts the steps each role ran, and the progress line
#                                        of the last step is printed
#   dflash_train_e2e.sh BIN_DIR resume   stopped after 5 steps and resumed at half the token_budget:
#                                        every token of the epoch trained exactly once; a resume on
#                                        another dataset of as many documents is refused
#   dflash_train_e2e.sh BIN_DIR oom      an out-of-memory on a target, then on the drafter: every rank
#                                        exits 3 with the resume command, which resumes and finishes
#                                        the epoch with every token trained exactly once; with
#                                        train.oom = "shrink" the run restarts every stream with half
#                                        the budget itself and still trains every token exactly once
#                                        (also with one target, whose new link joins the same ranks)
#   dflash_train_e2e.sh BIN_DIR stop     SIGUSR1 to mpirun: every rank exits 0, the drafter with a
#                                        checkpoint of its last step
#   dflash_train_e2e.sh BIN_DIR kl       train.loss = "kl": the targets also send their final hidden state;
#                                        a 6-step run reports drafter steps 1..6
#   dflash_train_e2e.sh BIN_DIR union    2 targets -> 2 data-parallel drafters equal 2 targets -> 1
#                                        drafter taking one batch of each per step (grad_accum 2,
#                                        fan_in round_robin): same weights after 6 steps; and that
#                                        run stopped after 3 steps and resumed equals it uninterrupted;
#                                        with the newest checkpoint damaged, --resume auto takes both
#                                        drafters back to the one before, and they train to the same
#                                        weights
#   dflash_train_e2e.sh BIN_DIR weights  targets load a tiny-dense target that moe_train trained
#                                        (model.weights = its run directory); a tiny-moe one is refused
#   dflash_train_e2e.sh BIN_DIR end      at the end of the data every batch sent is trained (a last
#                                        partial step included) and the end line counts all 33 samples
#                                        and 11325 tokens as trained, none discarded: round-robin fan-in
#                                        2 -> 1, grad_accum 5, and 2 targets -> 2 drafters
#   dflash_train_e2e.sh BIN_DIR nonfinite a NaN drafter loss stops every rank with exit 4 and one message
#                                        naming the rank and step, the last checkpoint intact;
#                                        train.skip_nonfinite = true skips that step, changing nothing
#   dflash_train_e2e.sh BIN_DIR recommend the cpu-7t1d demo, its drafter slowed by a fixed delay per micro-batch
#                                        (TOPOTRAIN_FAULT_SLOW_DRAFTER), is drafter-bound: topotrain-report
#                                        recommends more drafters (at most one per target) and writes that
#                                        topology, which runs the same steps with those role counts, its
#                                        measured speedup within 30% of the predicted one
#   dflash_train_e2e.sh BIN_DIR eval     held-out documents (data.eval_path, train.eval_every = 2): the drafter's
#                                        held-out tau and acc@k are logged and in metrics.jsonl and timings.h5
#                                        after steps 2, 4 and the last, 5, and training is bit for bit that of
#                                        the run without them; stopped after 3 and resumed, the held-out
#                                        results equal the uninterrupted run's; data.eval_fraction to the end of
#                                        the data on 2 targets -> 2 drafters evaluates every 3 steps and after
#                                        its last, and every batch sent is trained once (what an evaluation
#                                        paused is not sent again); a resume holding out another share is refused
#   dflash_train_e2e.sh BIN_DIR speculate train.eval_speculate = 3 with held-out chat documents
#                                        (data/chat_demo.py): after each held-out pass the first drafter
#                                        decodes 3 held-out prompts by speculative decoding, lossless, and
#                                        logs the real and a trivial drafter's tau, which metrics.jsonl and
#                                        topotrain-report carry; without held-out documents it is refused
#   dflash_train_e2e.sh BIN_DIR auto     train.token_budget = "auto": a limit no stage fits is refused on every
#                                        rank; under one that fits, targets and drafter each log their measure
#                                        and the stream packs with the smaller stage's budget, training bit for
#                                        bit as that budget set; a resume measures again; an out-of-memory on
#                                        the drafter, then on a target, shrinks by the measure (0.9x on CPU
#                                        ranks, which know no failing peak) and trains every token once
set -euo pipefail
bin=$1 scenario=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --oversubscribe --allow-run-as-root --bind-to none)
source "$(dirname "$0")/stop_on_signal.sh"
"$bin/topotrain-prepare" -q --split paragraph -o "$work/small.h5" /usr/share/common-licenses/Apache-2.0 >/dev/null
dataset_tokens=11325
# The drafters' end line when the data ended the run: every sample and token trained.
all_trained="trained 33 samples ($dataset_tokens tokens), skipped as not finite 0 samples (0 tokens) in 0 steps, discarded 0 samples (0 tokens)"

topology() {  # topology T [FAN_IN]: a CPU topology file with T targets feeding one drafter
  local t=$1 fan_in=${2:-arrival}
  printf '[topology]\nname = "cpu-%dt1d"\ninterconnect = "cpu"\n' "$t" > "$work/cpu-${t}t1d.toml"
  printf '[[roles]]\nrole = "target"\nranks = [%s]\ndevices = "cpu"\n' "$(seq -s, 0 $((t - 1)))" >> "$work/cpu-${t}t1d.toml"
  printf '[[roles]]\nrole = "drafter"\nranks = [%d]\ndevices = "cpu"\n[links]\nqueue_depth = 2\nfan_in = "%s"\n' \
    "$t" "$fan_in" >> "$work/cpu-${t}t1d.toml"
  echo "$work/cpu-${t}t1d.toml"
}

common=(--set data.path="$work/small.h5" --set model.preset=tiny-dense --set model.draft_layers=1 --set model.taps=1
        --set model.block_size=4 --set train.anchors=8 --set train.token_budget=256 --set train.max_steps=0
        --set log.every=5 --set log.samples=true --set checkpoint.dir="$work")

train() {  # train T RUN [args...]: T targets + 1 drafter, output in $work/RUN.log (appended)
  local t=$1 run=$2
  shift 2
  timeout 300 "${mpirun[@]}" -np $((t + 1)) "$bin/dflash_train" "$(topology "$t" "${FAN_IN:-arrival}")" "${common[@]}" \
    --set checkpoint.run="$run" "$@" >>"$work/$run.log" 2>&1
}

# Every token of the epoch trained exactly once: the drafters' sample logs expanded to
# (sample, position) pairs have no repeat and hold all of the dataset's tokens.
covers_epoch_once() {  # covers_epoch_once RUN DRAFTER_RANK...
  local run=$1
  shift
  (cd "$work/$run" && for r in "$@"; do cat "samples-rank-$r.txt"; done) |
    awk '{ for (i = $2; i < $3; ++i) print $1, i }' | sort > "$work/$run.tokens"
  local repeats total
  repeats=$(uniq -d "$work/$run.tokens" | wc -l)
  total=$(wc -l < "$work/$run.tokens")
  [[ $repeats == 0 && $total == "$dataset_tokens" ]] || {
    echo "$run: $total tokens trained, $repeats of them more than once (want $dataset_tokens, none twice)"
    exit 1
  }
}

case $scenario in
fanin)
  timeout 300 "${mpirun[@]}" -np 8 "$bin/dflash_train" topology/cpu-7t1d.toml "${common[@]}" --set checkpoint.run=fanin \
    --set log.profile_step=2 > "$work/fanin.log" 2>&1 || { cat "$work/fanin.log"; exit 1; }
  for rank in 0 1 2 3 4 5 6 7; do  # every rank, target or drafter, profiled its step 2
    head -1 "$work/fanin/profile-step2-rank$rank.txt" | grep -q "^profile of step 2, rank $rank on cpu" ||
      { echo "no profile of step 2 from rank $rank"; ls "$work/fanin"; exit 1; }
  done
  sort "$work"/fanin/samples-rank-[0-6].txt > "$work/sent"
  sort "$work/fanin/samples-rank-7.txt" > "$work/trained"
  cmp -s "$work/sent" "$work/trained" || { echo "trained pieces differ from the sent ones"; diff "$work/sent" "$work/trained" | head; exit 1; }
  covers_epoch_once fanin 7
  grep -q "$all_trained" "$work/fanin.log" || { grep "drafter done" "$work/fanin.log"; exit 1; }
  "$bin/topotrain-report" "$work/fanin" > "$work/report.txt"
  grep -q "role target (ranks 0,1,2,3,4,5,6)" "$work/report.txt"
  grep -q "role drafter (rank 7)" "$work/report.txt"
  grep -q "^bottleneck: " "$work/report.txt" || { cat "$work/report.txt"; exit 1; }
  # Steps reported = steps run: the drafter's trained steps, the targets' batches sent.
  steps=$(grep -Eo 'drafter done: [0-9]+ steps' "$work/fanin.log" | awk '{print $3}')
  batches=$(grep -Eo 'target stream [0-9]+ done: [0-9]+ batches' "$work/fanin.log" | awk '{n += $5} END {print n}')
  grep -q "role drafter (rank 7): steps 1..$steps, $steps rank-steps" "$work/report.txt" || { cat "$work/report.txt"; exit 1; }
  grep -Eq "role target \(ranks 0,1,2,3,4,5,6\): steps 1\.\.[0-9]+, $batches rank-steps" "$work/report.txt" ||
    { echo "the targets sent $batches batches"; cat "$work/report.txt"; exit 1; }
  # log.every = 5 and an epoch's steps are not known ahead: the last step still prints its line.
  grep -Eq "\[rank 7 drafter\] step $steps \| loss [0-9.]+ \| tau [0-9.]+ acc@1 [0-9.]+ \(trivial drafters: mode [0-9.]+ [0-9.]+, slot-mode [0-9.]+ [0-9.]+\) \| lr [0-9.]+e-[0-9]+ \| gnorm [0-9.e+-]+ \| [0-9.]+ [KM]?tok/s \([0-9.]+ [KM]?tok/s per rank\) \| comm [0-9]+% \| starved [0-9]+% \| [0-9]+ coll \| rss [0-9.]+ GiB" \
    "$work/fanin.log" || { grep "drafter\] step" "$work/fanin.log"; echo "no line of the last step, $steps"; exit 1; }
  # The drafter's news is in the run's log too, beside rank 0's.
  grep -q "\[rank 7 drafter\] step $steps |" "$work/fanin/log.txt"
  grep -q "\[rank 0 target\] dataset $work/small.h5: [0-9]* documents, $dataset_tokens tokens, loaded in" "$work/fanin/log.txt"
  ;;
resume)
  train 3 straight || { cat "$work/straight.log"; exit 1; }
  covers_epoch_once straight 3
  train 3 half --set train.max_steps=5 || { cat "$work/half.log"; exit 1; }
  grep -q "drafter done: 5 steps" "$work/half.log"
  train 3 half --set train.token_budget=128 --resume auto || { cat "$work/half.log"; exit 1; }
  grep -q "resumed from .*step-0*5.h5 at step 5" "$work/half.log"
  covers_epoch_once half 3
  # Another dataset of as many documents (33): the drafter, which reads only its header,
  # refuses it by its token count, and every rank stops.
  for i in $(seq 33); do printf '{"text": "document %d %*s"}\n' "$i" "$i" x; done > "$work/other.jsonl"
  "$bin/topotrain-prepare" -q -o "$work/other.h5" "$work/other.jsonl" >/dev/null
  if train 3 half --set data.path="$work/other.h5" --resume auto; then
    cat "$work/half.log"; echo "a resume on another dataset of as many documents was not refused"; exit 1
  fi
  refused="was trained on $dataset_tokens tokens ($work/small.h5), but this launch trains on [0-9]* tokens "
  grep -q "$refused($work/other.h5). The data positions of its 3 target streams would skip" "$work/half.log" ||
    { cat "$work/half.log"; exit 1; }
  ;;
oom)
  for fault in 1:3 3:4; do  # target rank 1 in its batch 3; the drafter (rank 3) in step 4
    run=oom-${fault/:/-}
    if TOPOTRAIN_FAULT_OOM=$fault train 3 "$run" --set checkpoint.every_steps=2; then
      cat "$work/$run.log"; echo "expected the run with TOPOTRAIN_FAULT_OOM=$fault to fail"; exit 1
    fi
    grep -q "out of memory on rank ${fault%:*} at step ${fault#*:} with train.token_budget = 256" "$work/$run.log" ||
      { cat "$work/$run.log"; exit 1; }
    grep -q 'or set train.oom = "shrink" to halve the budget in-process' "$work/$run.log" ||
      { cat "$work/$run.log"; echo "does not say train.oom"; exit 1; }
    command=$(grep -Eo "mpirun -np 4 dflash_train .*--set train.token_budget=128 --resume auto" "$work/$run.log")
    command=${command#mpirun }
    eval "timeout 300 ${mpirun[*]} ${command/dflash_train/$bin/dflash_train}" >>"$work/$run.log" 2>&1 ||
      { cat "$work/$run.log"; exit 1; }
    grep -q "resumed from .*step-" "$work/$run.log"
    covers_epoch_once "$run" 3
    # train.oom = "shrink": every stream restarts with half the budget, in the same run.
    run=shrink-${fault/:/-}
    TOPOTRAIN_FAULT_OOM=$fault train 3 "$run" --set train.oom=shrink || { cat "$work/$run.log"; exit 1; }
    grep -Eq "(retrying the step|restarting every stream) with token_budget 128" "$work/$run.log" ||
      { cat "$work/$run.log"; echo "no shrink to 128"; exit 1; }
    grep -q "drafter done: .*, recomputed after a restart [0-9]* samples" "$work/$run.log" ||
      { grep "drafter done" "$work/$run.log"; exit 1; }
    covers_epoch_once "$run" 3
  done
  # One target: its new link is between the same two ranks as the old one, so a message
  # the old link left behind would reach it (the restarted stream then ended at once).
  TOPOTRAIN_FAULT_OOM=0:3 train 1 shrink-1t1d --set train.oom=shrink || { cat "$work/shrink-1t1d.log"; exit 1; }
  grep -q "restarting every stream with token_budget 128" "$work/shrink-1t1d.log" || { cat "$work/shrink-1t1d.log"; exit 1; }
  covers_epoch_once shrink-1t1d 1
  ;;
stop)
  stop_on_signal "$work/stop.log" "${mpirun[@]}" -np 4 "$bin/dflash_train" "$(topology 3)" "${common[@]}" \
    --set checkpoint.run=stop --set train.epochs=1000 --set log.every=1
  step=$(grep -Eo 'drafter done: [0-9]+ steps' "$work/stop.log" | awk '{print $3}')
  [[ -n $step && -f $work/stop/step-$(printf '%08d' "$step").h5 ]] || { cat "$work/stop.log"; exit 1; }
  echo "stopped after step $step with its checkpoint"
  ;;
kl)
  train 2 kl --set train.loss=kl --set train.max_steps=6 || { cat "$work/kl.log"; exit 1; }
  grep -q "loss kl" "$work/kl.log"
  grep -q "drafter done: 6 steps" "$work/kl.log"
  "$bin/topotrain-report" "$work/kl" > "$work/report.txt"
  grep -q "role drafter (rank 2): steps 1..6, 6 rank-steps" "$work/report.txt" || { cat "$work/report.txt"; exit 1; }
  ;;
union)
  # train.schedule = "tokens": a launch stopped at step 3 by max_steps leaves its LR schedule
  # where an uninterrupted launch of 6 steps has it.
  steps=(--set train.max_steps=6 --set checkpoint.every_steps=3 --set train.schedule=tokens)
  # topology/cpu-2t2d.toml without its [model] and [train] tables: the settings of `common` only.
  sed '/^\[model\]/,$d' topology/cpu-2t2d.toml > "$work/cpu-2t2d.toml"
  timeout 300 "${mpirun[@]}" -np 4 "$bin/dflash_train" "$work/cpu-2t2d.toml" "${common[@]}" "${steps[@]}" \
    --set checkpoint.run=two > "$work/two.log" 2>&1 || { cat "$work/two.log"; exit 1; }
  rr=(--set train.grad_accum=2 "${steps[@]}")
  FAN_IN=round_robin train 2 one "${rr[@]}" || { cat "$work/one.log"; exit 1; }
  grep -q "2 batch(es) per step taken round-robin" "$work/one.log"
  "$bin/checkpoint_diff" "$work/two/step-00000006.h5" "$work/one/step-00000006.h5" 1e-6 model/
  # Round-robin makes the run independent of timing: interrupted and resumed = uninterrupted.
  FAN_IN=round_robin train 2 resumed --set train.grad_accum=2 --set train.max_steps=3 --set train.schedule=tokens ||
    { cat "$work/resumed.log"; exit 1; }
  FAN_IN=round_robin train 2 resumed "${rr[@]}" --resume auto || { cat "$work/resumed.log"; exit 1; }
  "$bin/checkpoint_diff" "$work/one/step-00000006.h5" "$work/resumed/step-00000006.h5" 0 model/
  # The two drafters' newest checkpoint damaged: --resume auto takes both back to step 3 alike
  # (an agreement of the drafters' group, without the targets), and steps 4..6 come out the same.
  cp "$work/two/step-00000006.h5" "$work/two-step6.h5"
  python3 "$(dirname "$0")/flip_bytes.py" "$work/two/step-00000006.h5"
  timeout 300 "${mpirun[@]}" -np 4 "$bin/dflash_train" "$work/cpu-2t2d.toml" "${common[@]}" "${steps[@]}" \
    --set checkpoint.run=two --resume auto > "$work/two.log" 2>&1 || { cat "$work/two.log"; exit 1; }
  grep -qF -- "--resume auto falls back to $work/two/step-00000003.h5" "$work/two.log" ||
    { cat "$work/two.log"; echo "no fallback past the damaged checkpoint"; exit 1; }
  "$bin/checkpoint_diff" "$work/two-step6.h5" "$work/two/step-00000006.h5" 1e-6 model/
  ;;
weights)
  printf '[topology]\nname = "one"\ninterconnect = "cpu"\n[[roles]]\nrole = "trainer"\nranks = [0]\ndevices = "cpu"\n' \
    > "$work/one.toml"
  for preset in tiny-dense tiny-moe; do
    timeout 300 "${mpirun[@]}" -np 1 "$bin/moe_train" "$work/one.toml" --set data.path="$work/small.h5" \
      --set model.preset=$preset --set train.token_budget=256 --set train.max_steps=2 --set checkpoint.dir="$work" \
      --set checkpoint.run=$preset > "$work/$preset.log" 2>&1 || { cat "$work/$preset.log"; exit 1; }
  done
  train 2 weights --set train.max_steps=4 --set model.weights="$work/tiny-dense" || { cat "$work/weights.log"; exit 1; }
  grep -q "drafter done: 4 steps" "$work/weights.log"
  grep -q "\[rank 0 target\] weights loaded from $work/tiny-dense in [0-9.]* s" "$work/weights.log"
  if train 2 wrong --set train.max_steps=4 --set model.weights="$work/tiny-moe"; then
    echo "a tiny-moe checkpoint was accepted as a tiny-dense target"; exit 1
  fi
  # One message and exit 2 on every rank, not an abort.
  grep -q "^dflash_train: error: model.preset = \"tiny-dense\" (--set) is not the model model.weights = \"$work/tiny-moe\" (--set) holds, model preset 'tiny-moe': model_type \"qwen3\" vs \"qwen3_moe\"" "$work/wrong.log" ||
    { cat "$work/wrong.log"; exit 1; }
  grep -q "MPI_ABORT" "$work/wrong.log" && { cat "$work/wrong.log"; exit 1; }
  ;;
end)
  FAN_IN=round_robin train 2 rr || { cat "$work/rr.log"; exit 1; }
  covers_epoch_once rr 2
  grep -q "$all_trained" "$work/rr.log" || { grep "drafter done" "$work/rr.log"; exit 1; }
  train 3 accum --set train.grad_accum=5 || { cat "$work/accum.log"; exit 1; }
  covers_epoch_once accum 3
  grep -q "$all_trained" "$work/accum.log" || { grep "drafter done" "$work/accum.log"; exit 1; }
  sed '/^\[model\]/,$d' topology/cpu-2t2d.toml > "$work/cpu-2t2d.toml"
  timeout 300 "${mpirun[@]}" -np 4 "$bin/dflash_train" "$work/cpu-2t2d.toml" "${common[@]}" \
    --set checkpoint.run=two > "$work/two.log" 2>&1 || { cat "$work/two.log"; exit 1; }
  covers_epoch_once two 2 3
  grep -q "$all_trained" "$work/two.log" || { grep "drafter done" "$work/two.log"; exit 1; }
  ;;
nonfinite)
  code=0
  TOPOTRAIN_FAULT_NONFINITE=2:3 train 2 nan --set checkpoint.every_steps=2 || code=$?
  [[ $code -eq 4 ]] || { cat "$work/nan.log"; echo "exit $code, expected 4"; exit 1; }
  [[ $(grep -c "the loss on rank 2 (drafter) is not finite at step 3; no drafter applied it" "$work/nan.log") -eq 1 ]] ||
    { cat "$work/nan.log"; echo "expected one message naming rank 2 and step 3"; exit 1; }
  [[ $(cat "$work/nan/latest") == step-00000002.h5 ]] || { echo "the last checkpoint is not step 2's"; exit 1; }
  # Skipped: step 3 changes no weight and no AdamW moment. Its checkpoint (the last step's)
  # and step 2's (the first at the cadence) are written whatever the writer's pace: a
  # checkpoint due while another is being written would be deferred.
  TOPOTRAIN_FAULT_NONFINITE=2:3 train 2 skip --set train.skip_nonfinite=true --set checkpoint.every_steps=2 \
    --set checkpoint.keep=10 --set train.max_steps=3 || { cat "$work/skip.log"; exit 1; }
  grep -q "not finite at step 3; train.skip_nonfinite: step skipped (1 so far)" "$work/skip.log"
  grep -q "drafter done: 3 steps, .*skipped as not finite [0-9]* samples ([1-9][0-9]* tokens) in 1 steps" \
    "$work/skip.log" || { grep "drafter done" "$work/skip.log"; exit 1; }
  "$bin/checkpoint_diff" "$work/skip/step-00000002.h5" "$work/skip/step-00000003.h5" 0 model/
  "$bin/checkpoint_diff" "$work/skip/step-00000002.h5" "$work/skip/step-00000003.h5" 0 optim/
  ;;
recommend)
  # Enough epochs that the data never ends the run: both splits run all their steps. Every
  # drafter micro-batch takes 0.4 s longer, as on a slower GPU, without using a core: eight
  # ranks sharing a CI machine's two cores then run at the steady per-rank rates the model
  # assumes (unslowed, their speed swung between runs from x0.7 to x2.0 of the 7t1d's).
  export TOPOTRAIN_FAULT_SLOW_DRAFTER=0.4
  steps=(--set train.max_steps=12 --set train.epochs=100 --set log.every=6)
  timeout 300 "${mpirun[@]}" -np 8 "$bin/dflash_train" topology/cpu-7t1d.toml "${common[@]}" "${steps[@]}" \
    --set checkpoint.run=measured > "$work/measured.log" 2>&1 || { cat "$work/measured.log"; exit 1; }
  "$bin/topotrain-report" "$work/measured" --skip 2 --recommend-topology "$work/recommended.toml" > "$work/report.txt" ||
    { cat "$work/report.txt"; exit 1; }
  split=$(grep -Eo '^recommended split: [0-9]+t[0-9]+d' "$work/report.txt" | awk '{print $3}') ||
    { cat "$work/report.txt"; echo "no split recommended"; exit 1; }
  targets=${split%t*} drafters=${split#*t}
  drafters=${drafters%d}
  (( drafters > 1 && targets + drafters == 8 )) || { cat "$work/report.txt"; echo "recommended $split, not more drafters"; exit 1; }
  grep -q "recommended topology written to $work/recommended.toml" "$work/report.txt"
  predicted=$(grep -Eo "^recommended split: $split \(x[0-9.]+" "$work/report.txt" | grep -Eo '[0-9.]+$')
  # The file runs as written: its role counts are the recommended ones.
  timeout 300 "${mpirun[@]}" -np 8 "$bin/dflash_train" "$work/recommended.toml" "${common[@]}" "${steps[@]}" \
    --set checkpoint.run=resplit > "$work/resplit.log" 2>&1 || { cat "$work/recommended.toml" "$work/resplit.log"; exit 1; }
  grep -q "drafter done: 12 steps" "$work/resplit.log" || { cat "$work/resplit.log"; exit 1; }
  "$bin/topotrain-report" "$work/resplit" --skip 2 > "$work/resplit-report.txt"
  grep -q "role target (ranks $(seq -s, 0 $((targets - 1))))" "$work/resplit-report.txt" ||
    { cat "$work/resplit-report.txt"; exit 1; }
  grep -q "role drafter (ranks $(seq -s, "$targets" 7))" "$work/resplit-report.txt" || { cat "$work/resplit-report.txt"; exit 1; }
  before=$(grep -Eo 'measured [0-9]+ tok/s trained' "$work/report.txt" | awk '{print $2}')
  after=$(grep -Eo 'measured [0-9]+ tok/s trained' "$work/resplit-report.txt" | awk '{print $2}')
  sed -n '/^topology model/,/^recommended split/p' "$work/report.txt"
  echo "7t1d: $before tok/s trained; $split: $after tok/s: measured x$(awk -v a="$after" -v b="$before" 'BEGIN {printf "%.2f", a / b}'), predicted x$predicted"
  # The recommended split moves throughput the predicted way, within 30% of the predicted ratio.
  awk -v a="$after" -v b="$before" -v p="$predicted" 'BEGIN { r = a / b / p; exit !(r >= 0.7 && r <= 1.3) }' ||
    { echo "measured speedup not within 30% of the predicted x$predicted"; exit 1; }
  ;;
speculate)
  python3 data/chat_demo.py 3 12 > "$work/chat.jsonl"
  "$bin/topotrain-prepare" -q -o "$work/chat.h5" "$work/chat.jsonl" >/dev/null
  train 1 spec --set data.eval_path="$work/chat.h5" --set train.eval_every=3 --set train.max_steps=6 \
    --set train.eval_speculate=3 || { cat "$work/spec.log"; exit 1; }
  for step in 3 6; do
    grep -Eq "\[rank 1 drafter\] held-out speculative decoding after step $step \(3 prompts, up to 128 tokens each\): tau [0-9.]+ \(trivial drafter [0-9.]+\), [0-9.]+ target forwards per token \(trivial [0-9.]+\), lossless, in [0-9.]+ s" \
      "$work/spec.log" || { grep "held-out" "$work/spec.log"; echo "no lossless speculative decoding after step $step"; exit 1; }
  done
  [[ $(grep -c '"eval_decoded_tau"' "$work/spec/metrics.jsonl") == 2 ]] || { cat "$work/spec/metrics.jsonl"; exit 1; }
  "$bin/topotrain-report" "$work/spec" > "$work/spec-report.txt"
  grep -Eq "by speculative decoding of held-out prompts after step 6: tau [0-9.]+ \(trivial drafter [0-9.]+\)" \
    "$work/spec-report.txt" || { cat "$work/spec-report.txt"; exit 1; }
  # Nothing held out: nothing to decode, refused before any rank starts.
  if train 1 refused --set train.eval_speculate=3; then echo "train.eval_speculate without held-out documents ran"; exit 1; fi
  grep -q "train.eval_speculate = 3 (--set) has nothing to evaluate" "$work/refused.log" || { cat "$work/refused.log"; exit 1; }
  # Held-out documents without a loss mask have no prompt to cut: refused at the start too.
  if train 1 unmasked --set train.eval_speculate=3 --set data.eval_fraction=0.1; then
    echo "train.eval_speculate on unmasked held-out documents ran"; exit 1
  fi
  grep -q "train.eval_speculate = 3: the held-out documents (data.eval_fraction of $work/small.h5) have no loss mask" \
    "$work/unmasked.log" || { cat "$work/unmasked.log"; exit 1; }
  ;;
eval)
  # A few paragraphs of another text as the held-out documents; round-robin fan-in makes
  # training independent of timing, so that runs can be compared bit for bit.
  "$bin/topotrain-prepare" -q --split paragraph -o "$work/held.h5" /usr/share/common-licenses/BSD >/dev/null
  held=(--set data.eval_path="$work/held.h5" --set train.eval_every=2)
  # train.schedule = "tokens": the launch stopped at step 3 below resumes on the same LR schedule.
  steps=(--set train.grad_accum=2 --set train.max_steps=5 --set checkpoint.every_steps=5 --set train.schedule=tokens)
  FAN_IN=round_robin train 2 plain "${steps[@]}" || { cat "$work/plain.log"; exit 1; }
  FAN_IN=round_robin train 2 held "${steps[@]}" "${held[@]}" || { cat "$work/held.log"; exit 1; }
  documents=$(grep -Eo "dataset $work/held.h5: [0-9]+ documents" "$work/held.log" | head -1 | awk '{print $3}')
  for step in 2 4 5; do
    grep -Eq "\[rank 2 drafter\] held-out draft quality after step $step: tau [0-9.]+ acc@1 [0-9.]+ acc@2 [0-9.]+ acc@3 [0-9.]+ \(trivial drafters: mode [0-9.]+ [0-9.]+, slot-mode [0-9.]+ [0-9.]+\) \| loss [0-9.]+ over [1-9][0-9]* anchors \([1-9][0-9]* tokens\) of $documents documents, in [0-9.]+ s" \
      "$work/held.log" || { grep "held-out" "$work/held.log"; echo "no held-out draft quality after step $step"; exit 1; }
  done
  [[ $(grep -c "held-out draft quality after step" "$work/held.log") == 3 ]] || { grep "held-out" "$work/held.log"; exit 1; }
  # Evaluating changes no weight, no AdamW moment and no data position: the same training.
  "$bin/checkpoint_diff" "$work/plain/step-00000005.h5" "$work/held/step-00000005.h5" 0 model/
  "$bin/checkpoint_diff" "$work/plain/step-00000005.h5" "$work/held/step-00000005.h5" 0 optim/
  cmp "$work/plain/samples-rank-2.txt" "$work/held/samples-rank-2.txt" || { echo "other batches trained"; exit 1; }
  # timings.h5: the drafter's steps timed the evaluation (phase eval), the targets' did not.
  "$bin/topotrain-report" "$work/held" > "$work/held-report.txt"
  sed -n '/^role drafter/,/^ *wall/p' "$work/held-report.txt" | grep -Eq "^  eval +[0-9.]+ " ||
    { cat "$work/held-report.txt"; echo "no eval phase on the drafter"; exit 1; }
  sed -n '/^role target/,/^ *wall/p' "$work/held-report.txt" | grep -q "^  eval " &&
    { cat "$work/held-report.txt"; echo "an eval phase on a target"; exit 1; }
  # Stopped after step 3 (its last: evaluated) and resumed: steps 4 and 5 evaluate as before.
  FAN_IN=round_robin train 2 resumed "${steps[@]}" "${held[@]}" --set train.max_steps=3 || { cat "$work/resumed.log"; exit 1; }
  FAN_IN=round_robin train 2 resumed "${steps[@]}" "${held[@]}" --resume auto || { cat "$work/resumed.log"; exit 1; }
  "$bin/checkpoint_diff" "$work/held/step-00000005.h5" "$work/resumed/step-00000005.h5" 0 model/
  /usr/bin/python3 - "$work" <<'PY'
import json, math, sys
work = sys.argv[1]
def lines(run):
    return [json.loads(l) for l in open(f"{work}/{run}/metrics.jsonl")]
plain, held, resumed = lines("plain"), lines("held"), lines("resumed")
evaluated = [m["step"] for m in held if "eval_tau" in m]
assert evaluated == [2, 4, 5], evaluated
for m in held:
    if "eval_tau" in m:
        acc = m["eval_draft_accuracy"]
        assert len(acc) == 3 and all(0 <= a <= 1 for a in acc), acc
        tau, prefix = 1.0, 1.0
        for a in acc:
            prefix *= a
            tau += prefix
        assert math.isclose(m["eval_tau"], tau, rel_tol=1e-12), (m["eval_tau"], tau)
        assert math.isfinite(m["eval_loss"]) and m["eval_loss"] > 0, m
    else:
        assert "eval_loss" not in m and "eval_draft_accuracy" not in m, m
assert [m["loss"] for m in plain] == [m["loss"] for m in held], "training losses differ"
assert not any("eval_tau" in m for m in plain)
# The resumed run: its first launch evaluated after step 2 and its last step, 3; the second
# after 4 and 5, as the uninterrupted run did.
assert [m["step"] for m in resumed if "eval_tau" in m] == [2, 3, 4, 5], resumed
by_step = {m["step"]: m for m in held}
for m in resumed:
    if m["step"] in (4, 5):
        for key in ("eval_tau", "eval_draft_accuracy", "eval_loss", "loss"):
            assert m[key] == by_step[m["step"]][key], (key, m, by_step[m["step"]])
PY
  # data.eval_fraction on 2 targets -> 2 drafters to the end of the data: the drafters train
  # on the split and evaluate after the last step, which the data decides.
  sed '/^\[model\]/,$d' topology/cpu-2t2d.toml > "$work/cpu-2t2d.toml"
  frac=(--set data.eval_fraction=0.2 --set train.eval_every=3 --set checkpoint.run=frac)
  timeout 300 "${mpirun[@]}" -np 4 "$bin/dflash_train" "$work/cpu-2t2d.toml" "${common[@]}" "${frac[@]}" \
    > "$work/frac.log" 2>&1 || { cat "$work/frac.log"; exit 1; }
  grep -q "held out [0-9]* documents .* for evaluation (data.eval_fraction = 0.2)" "$work/frac.log"
  steps=$(grep -Eo 'drafter done: [0-9]+ steps' "$work/frac.log" | awk '{print $3}')
  grep -q "held-out draft quality after step $steps: " "$work/frac.log" || { grep "held-out\|drafter done" "$work/frac.log"; exit 1; }
  evaluations=$(( steps / 3 + (steps % 3 > 0) ))
  [[ $(grep -c "held-out draft quality after step" "$work/frac.log") == "$evaluations" ]] ||
    { grep "held-out\|drafter done" "$work/frac.log"; echo "expected $evaluations evaluations"; exit 1; }
  grep -q "drafter done: .*discarded 0 samples (0 tokens)" "$work/frac.log" || { grep "drafter done" "$work/frac.log"; exit 1; }
  # What an evaluation paused was trained after it, not sent again: the targets sent what the
  # drafters trained, each piece once.
  sort "$work"/frac/samples-rank-[01].txt > "$work/frac.sent"
  sort "$work"/frac/samples-rank-[23].txt > "$work/frac.trained"
  cmp -s "$work/frac.sent" "$work/frac.trained" || { echo "the targets sent other pieces than were trained"; exit 1; }
  [[ $(uniq -d "$work/frac.sent" | wc -l) == 0 ]] || { echo "a piece was sent twice"; exit 1; }
  if timeout 300 "${mpirun[@]}" -np 4 "$bin/dflash_train" "$work/cpu-2t2d.toml" "${common[@]}" "${frac[@]}" \
      --set data.eval_fraction=0.3 --resume auto > "$work/frac-other.log" 2>&1; then
    echo "a resume holding out another share of the documents was not refused"; exit 1
  fi
  grep -q "was trained on [0-9]* documents of [0-9]* tokens (.*), but this launch trains on [0-9]*" "$work/frac-other.log" ||
    { cat "$work/frac-other.log"; exit 1; }
  ;;
auto)
  auto=(--set train.token_budget=auto --set train.max_steps=6 --set checkpoint.every_steps=3)
  export FAN_IN=round_robin  # training independent of timing: runs compare bit for bit
  if train 2 tiny "${auto[@]}" --set train.memory_limit=1048576; then
    cat "$work/tiny.log"; echo "expected a 1 MiB train.memory_limit to be refused"; exit 1
  fi
  grep -q 'train.token_budget = "auto": not even a micro-batch of 128 tokens fits train.memory_fraction = 0.9 of 1.0 MiB (train.memory_limit) on one of the ranks (the fullest [a-z]* holds' \
    "$work/tiny.log" || { cat "$work/tiny.log"; exit 1; }
  # What a rank holds before any micro-batch, plus room for the activations of some hundred
  # tokens: the limit every stage's choice must obey.
  held=$(grep -Eo 'the fullest [a-z]+ holds [0-9.]+ [MG]iB' "$work/tiny.log" | head -1 | awk '{ print $5 * ($6 == "GiB" ? 1024 : 1) }')
  limit=$(awk -v held="$held" 'BEGIN { printf "%d", (held + 48) * 1048576 / 0.9 }')
  measured() {  # measured RUN ROLE: the budget ROLE's first rank logged
    grep -Eo "train.token_budget = \"auto\": [0-9]+ tokens per micro-batch; ${2}s: measured peak" "$work/$1.log" |
      tail -1 | awk '{ print $4 }'
  }
  train 2 auto "${auto[@]}" --set train.memory_limit="$limit" || { cat "$work/auto.log"; exit 1; }
  budget=$(measured auto target)
  [[ -n $budget && $budget == "$(measured auto drafter)" ]] ||
    { grep '"auto":' "$work/auto.log"; echo "targets and drafter logged different budgets"; exit 1; }
  if ((budget < 128 || budget >= 11392 || budget % 128 != 0)); then
    echo "expected a multiple of 128 below the dataset's size, got $budget"; exit 1
  fi
  grep -Eq "(targets|drafters) set the budget" "$work/auto.log" || { grep '"auto":' "$work/auto.log"; exit 1; }
  grep -q "drafter done: 6 steps" "$work/auto.log"
  train 2 fixed --set train.token_budget="$budget" --set train.max_steps=6 --set checkpoint.every_steps=3 ||
    { cat "$work/fixed.log"; exit 1; }
  "$bin/checkpoint_diff" "$work/auto/step-00000006.h5" "$work/fixed/step-00000006.h5" 0 model/
  "$bin/checkpoint_diff" "$work/auto/step-00000006.h5" "$work/fixed/step-00000006.h5" 0 optim/
  cmp "$work/auto/samples-rank-2.txt" "$work/fixed/samples-rank-2.txt" || { echo "other batches trained"; exit 1; }
  # A resume measures again (not a stored number) and trains on from the checkpoint.
  train 2 auto "${auto[@]}" --set train.memory_limit="$limit" --set train.max_steps=8 --resume auto ||
    { cat "$work/auto.log"; exit 1; }
  grep -q 'resumed from .*step-0*6.h5' "$work/auto.log"
  [[ $(grep -c 'tokens per micro-batch; drafters: measured peak' "$work/auto.log") == 2 ]]
  grep -q "drafter done: 8 steps" "$work/auto.log"
  # Out of memory on the drafter (rank 2) in step 2, then on target rank 0 in its batch 3,
  # train.oom left unset: every stream restarts 0.9x smaller, every token trained once.
  for fault in 2:2 0:3; do
    run=shrink-${fault/:/-}
    TOPOTRAIN_FAULT_OOM=$fault train 2 "$run" --set train.token_budget=auto --set train.memory_limit="$limit" ||
      { cat "$work/$run.log"; exit 1; }
    budget=$(measured "$run" drafter)
    shrunk=$(awk -v b="$budget" 'BEGIN { s = int(b * 0.9); if (s >= 128) s = int(s / 128) * 128; print s }')
    grep -Eq "train.token_budget = \"auto\": (retrying the step|restarting every stream) with token_budget $shrunk\b" \
      "$work/$run.log" || { grep -E "out of memory|token_budget [0-9]" "$work/$run.log"; echo "no shrink to $shrunk"; exit 1; }
    covers_epoch_once "$run" 2
  done
  ;;
*) echo "unknown scenario $scenario"; exit 2 ;;
esac
echo "PASS $scenario"
