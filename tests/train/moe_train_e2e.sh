#!/usr/bin/env bash
# End-to-end checks of moe_train on CPU ranks (tests/train/CMakeLists.txt runs each):
#   moe_train_e2e.sh BIN_DIR dp        np 2 and 4 at grad_accum 3 = one process over the same micro-batches;
#                                      the experts' busiest-first layout = expert order, bit for bit
#   moe_train_e2e.sh BIN_DIR mask      the loss covers the targets of loss mask 1 only, normalised by
#                                      their global count: np 2 and 4 = one process on masked data
#   moe_train_e2e.sh BIN_DIR resume    interrupted + resumed = uninterrupted (weights, and the losses
#                                      of metrics.jsonl, whose curve the resumed launch continues);
#                                      resumed again from an earlier checkpoint, the report reads the
#                                      launches as one run, the steps trained twice counted as
#                                      repeated, and the checkpoint past the resumed one is moved
#                                      aside; with the newest checkpoint damaged, --resume auto falls
#                                      back to the one before (and stops, saying so, where there is
#                                      none); resumed past its length, a launch says that it trains
#                                      nothing; resumed at half the token_budget it trains every sample
#                                      piece once, none skipped, and says which settings changed
#   moe_train_e2e.sh BIN_DIR tensorboard  log.tensorboard: a run and its resume each add an event file
#                                      in <run>/tensorboard/, the resumed one's steps continuing the
#                                      first's, train/loss = metrics.jsonl's loss, phase shares per step
#   moe_train_e2e.sh BIN_DIR slow_checkpoint  checkpoints written slower than their cadence are
#                                      deferred (logged), never block a step and change no weight; the
#                                      final one is written; a deferred one resumes like any other
#   moe_train_e2e.sh BIN_DIR oom       an out-of-memory on one rank stops all ranks with the resume
#                                      command, which then works; train.oom = "shrink" carries on,
#                                      and log.samples lists no piece of the discarded step
#   moe_train_e2e.sh BIN_DIR nonfinite a NaN loss on one rank stops every rank with exit 4, one message
#                                      naming the rank and step, the last checkpoint intact;
#                                      train.skip_nonfinite = true skips that step, changing nothing
#                                      (AdamW's step count included), on 2 ranks and on one
#   moe_train_e2e.sh BIN_DIR stop      SIGUSR1 to mpirun stops every rank after the same step, with a
#                                      checkpoint of that step, and exit 0; SIGTERM alike, but mpirun
#                                      exits 1 (README "Failure and stopping" says why)
#   moe_train_e2e.sh BIN_DIR epochs    train.epochs = 1 and 2 on 2 ranks x grad_accum 3: every token of
#                                      the dataset trained exactly `epochs` times, none of the next
#                                      epoch's order (the last step is short); a token_budget larger
#                                      than the dataset is warned about and still trains each pass once
#   moe_train_e2e.sh BIN_DIR epoch     trained by epochs: the progress line has an ETA and the last
#                                      step's line is printed; <run>/log.txt holds rank 0's timestamped
#                                      lines with the dataset and every checkpoint written; the report
#                                      counts the steps trained; a resume on another dataset of as
#                                      many documents is refused, and so is one on a dataset of the same
#                                      lengths with other tokens (the token checksum)
#   moe_train_e2e.sh BIN_DIR nodes     the README's several-node launch (hostfile, TCP between ranks, -x for
#                                      the environment) on one node's slots trains what plain mpirun does;
#                                      so do two emulated nodes of two ranks (emulated_node_agent.sh), with
#                                      node-local ranks and GPUs; a checkpoint.dir the second node does not
#                                      share stops the resume on every rank with the fix
#   moe_train_e2e.sh BIN_DIR eval      data.eval_fraction holds documents out: the held-out loss is
#                                      logged and in metrics.jsonl on every train.eval_every-th step and
#                                      the last; a resume holding out another share is refused, the same
#                                      share, or another train.seed drawing other documents, is
#                                      refused; the same share resumes and evaluates on
#   moe_train_e2e.sh BIN_DIR launches  what launches print and write: the start block, settings.toml
#                                      per launch (this job's keys), one launch number in
#                                      metrics.jsonl, timings.h5 and the report, the LR schedule
#                                      ending at max_steps (or not, with train.schedule = "tokens"),
#                                      progress at log.level = "warn", a refusal as log.txt's last line
#   moe_train_e2e.sh BIN_DIR disk_full a checkpoint.dir on a file system that holds one checkpoint and
#                                      not two (a 4 MiB tmpfs; where mounts are refused, the second
#                                      checkpoint's write fails with ENOSPC by TOPOTRAIN_FAULT_DISK_FULL):
#                                      the job stops naming the OS's reason with the bytes needed and
#                                      free; no .tmp is left and `latest` still names the first checkpoint
#   moe_train_e2e.sh BIN_DIR disk_full_sizes  checkpoint.dir on tmpfs of 4 KiB to 640 KiB, checkpoints
#                                      off: the records' writes (the timing log's create, flush and
#                                      copy, log.txt, metrics.jsonl) meet the full disk one after
#                                      another; every launch that fails names the OS's reason and
#                                      leaves no .tmp and no half-made timing log (.start) behind
#   moe_train_e2e.sh BIN_DIR edited_data  a dataset changed in place after topotrain-prepare wrote it,
#                                      its attributes kept (h5py): one flipped bit refused at a fresh
#                                      start, every token rewritten refused at a resume, each with exit
#                                      2 naming the file, the chunks that differ and the fix; with the
#                                      stored checksums dropped too, the resume is refused by the
#                                      checkpoint's record of the tokens read
#   moe_train_e2e.sh BIN_DIR auto      train.token_budget = "auto" under a train.memory_limit: a limit
#                                      below what a rank holds is refused saying so; one with room
#                                      for about a thousand tokens picks a budget well below the
#                                      largest, and training with that budget set gives bit-identical
#                                      checkpoints and the same losses; a resume measures again; an
#                                      out-of-memory shrinks by the measure (train.oom unset)
set -euo pipefail
bin=$1 scenario=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --oversubscribe --allow-run-as-root --bind-to none)
source "$(dirname "$0")/stop_on_signal.sh"

topology() {  # topology N: a CPU topology file with N trainer ranks
  local n=$1 ranks
  ranks=$(seq -s, 0 $((n - 1)))
  printf '[topology]\nname = "cpu%d"\ninterconnect = "cpu"\n[[roles]]\nrole = "trainer"\nranks = [%s]\ndevices = "cpu"\n' \
    "$n" "$ranks" > "$work/cpu$n.toml"
  echo "$work/cpu$n.toml"
}

train() {  # train NP RUN_NAME [args...]: runs moe_train, output in $work/RUN_NAME.log
  local np=$1 run=$2
  shift 2
  timeout 300 "${mpirun[@]}" -np "$np" "$bin/moe_train" "$(topology "$np")" \
    --set model.preset=tiny-moe --set train.token_budget=256 --set train.lr=1e-2 --set train.warmup=0 \
    --set log.every=1 --set checkpoint.dir="$work" --set checkpoint.run="$run" "$@" >"$work/$run.log" 2>&1 || {
    cat "$work/$run.log"
    return 1
  }
}

latest() { echo "$work/$1/$(cat "$work/$1/latest")"; }

losses() { grep -Eo 'step [0-9]+ \| loss [0-9.]+' "$work/$1.log" | awk '{print $2, $5}'; }

same_losses() {  # same_losses RUN_A RUN_B: per-step losses agree to 1e-4 (relative)
  paste <(losses "$1") <(losses "$2") | awk -v a="$1" -v b="$2" '
    { n++; if ($1 != $3) { print "step mismatch " $1 " vs " $3; bad = 1 }
      d = $2 - $4; if (d < 0) d = -d; if (d > 1e-4 * $2) { print a " " $2 " vs " b " " $4 " at step " $1; bad = 1 } }
    END { if (n < 3) { print "too few loss lines: " n; bad = 1 } exit bad }'
}

case $scenario in
disk_full)
  full=$work/full
  mkdir -p "$full"
  common=(--set train.max_steps=12 --set checkpoint.every_steps=5 --set checkpoint.keep=3 --set checkpoint.dir="$full")
  space="[0-9.]+ MiB needed, [0-9.]+ (KiB|MiB|GiB) free of [0-9.]+ (MiB|GiB) on the file system holding $full/run"
  if mount -t tmpfs -o size=4m tmpfs "$full" 2>/dev/null; then
    trap 'umount "$full"; rm -rf "$work"' EXIT
    reason="No space left on device \\(ENOSPC\\)\\): $space"
  else
    echo "cannot mount a tmpfs: the second checkpoint's write fails as on a full disk instead"
    export TOPOTRAIN_FAULT_DISK_FULL=10
    reason="\\): No space left on device \\(ENOSPC\\); $space"
  fi
  if train 1 run "${common[@]}" >/dev/null; then echo "the job did not stop on a full disk"; exit 1; fi
  grep -Eq "checkpoint of step (5|10) in $full/run failed: cannot write $full/run/step-000000(05|10).h5 \(cannot (write|flush) .*$reason" \
    "$work/run.log" || { cat "$work/run.log"; echo "the failure does not name the OS's reason"; exit 1; }
  grep -q "keep fewer checkpoints (checkpoint.keep) or point checkpoint.dir at a file system with room" "$work/run.log" ||
    { cat "$work/run.log"; exit 1; }
  if ls "$full/run" | grep -q '\.tmp$'; then ls -la "$full/run"; echo "a .tmp was left behind"; exit 1; fi
  if [[ -f $full/run/latest ]]; then
    [[ $(cat "$full/run/latest") == step-00000005.h5 ]] && "$bin/checkpoint_diff" "$full/run/step-00000005.h5" \
      "$full/run/step-00000005.h5" 0 >/dev/null || { echo "latest does not name a whole checkpoint"; exit 1; }
  fi
  ;;
dp)
  # Adam divides by the root of tiny second moments, so fp32 summation-order noise in
  # rarely-seen embedding rows grows to ~1e-5 after a few steps at lr 1e-2: 1e-4 bounds it.
  train 1 ref6 --set train.grad_accum=6 --set train.max_steps=4
  train 2 np2 --set train.grad_accum=3 --set train.max_steps=4 --set log.profile_step=2
  for rank in 0 1; do
    head -1 "$work/np2/profile-step2-rank$rank.txt" | grep -q "^profile of step 2, rank $rank on cpu" ||
      { echo "rank $rank wrote no profile of step 2"; exit 1; }
  done
  # A device-only profile on CPU ranks is an error naming the setting, not an empty profile.
  if train 2 hostless --set train.max_steps=2 --set log.profile_step=1 --set log.profile_host=false >/dev/null; then
    echo "log.profile_host = false on CPU ranks did not fail"; exit 1
  fi
  grep -Eq "log.profile_host = false records only GPU activity, and rank [01] runs on cpu" "$work/hostless.log" ||
    { cat "$work/hostless.log"; echo "no error naming log.profile_host"; exit 1; }
  grep -q "attention math (per document), experts sorted loop in expert order, norms/rotary/SwiGLU/loss torch ops" \
    "$work/np2.log" || { echo "the start line does not name the CPU kernels"; exit 1; }
  # The experts' busiest-first layout trains what expert order does, bit for bit (bf16 compute
  # copies, which the layout needs, on CPU ranks too; docs/model.md).
  layout=(--set model.dtype=bf16 --set train.grad_accum=2 --set train.max_steps=4)
  train 1 order "${layout[@]}" --set model.expert_layout=expert_order
  grep -q "experts sorted loop in expert order" "$work/order.log" ||
    { cat "$work/order.log"; echo "model.expert_layout = expert_order did not act"; exit 1; }
  train 1 busiest "${layout[@]}" --set model.expert_layout=busiest_first
  grep -q "experts sorted loop in busiest first" "$work/busiest.log" ||
    { cat "$work/busiest.log"; echo "model.expert_layout = busiest_first did not act"; exit 1; }
  "$bin/checkpoint_diff" "$(latest order)" "$(latest busiest)" 0
  train 1 ref12 --set train.grad_accum=12 --set train.max_steps=4
  train 4 np4 --set train.grad_accum=3 --set train.max_steps=4
  same_losses ref6 np2
  same_losses ref12 np4
  grep -q "| 0 coll |" "$work/np2.log" && { echo "a step issued no collective"; exit 1; }
  "$bin/checkpoint_diff" "$(latest ref6)" "$(latest np2)" 1e-4 model/
  "$bin/checkpoint_diff" "$(latest ref12)" "$(latest np4)" 1e-4 model/
  ;;
mask)
  # At lr 0 step 1's loss is the untrained model's mean over the step's targets. With the
  # mask on the odd positions of each document, then on the even ones, the two means
  # weighted by their target counts (counted here from the pieces trained) must add up to
  # the mean without a mask: that holds only if each run trains exactly its half and
  # divides by the global count of that half, over both ranks and both micro-batches.
  demo=$bin/../data/demo.h5
  "$bin/masked_dataset" "$demo" "$work/odd.h5" odd
  "$bin/masked_dataset" "$demo" "$work/even.h5" even
  step1=(--set train.lr=0 --set train.max_steps=1 --set train.grad_accum=2 --set log.samples=true)
  train 2 unmasked "${step1[@]}"
  train 2 odd "${step1[@]}" --set data.path="$work/odd.h5"
  train 2 even "${step1[@]}" --set data.path="$work/even.h5"
  python3 - "$work" <<'PY'
import glob, re, sys
work = sys.argv[1]
def loss(run):
    return float(re.search(r"step 1 \| loss ([0-9.]+)", open(f"{work}/{run}.log").read()).group(1))
pieces = [tuple(map(int, line.split())) for path in glob.glob(f"{work}/unmasked/samples-rank-*.txt") for line in open(path)]
# A piece [b, e) of a sample predicts its positions b+1 .. e-1.
n_all = sum(e - b - 1 for _, b, e in pieces)
n_odd = sum(sum(1 for t in range(b + 1, e) if t % 2) for _, b, e in pieces)
n_even = n_all - n_odd
whole, odd, even = loss("unmasked"), loss("odd"), loss("even")
recombined = (odd * n_odd + even * n_even) / n_all
print(f"{len(pieces)} pieces, {n_all} targets ({n_odd} odd): loss {whole} = ({odd} x {n_odd} + {even} x {n_even}) / {n_all} = {recombined:.5f}")
assert abs(odd - whole) > 1e-3 and abs(even - whole) > 1e-3, "a masked run's loss equals the unmasked one"
assert abs(recombined - whole) <= 2e-4 * whole, "the masked losses do not add up to the unmasked one"
PY
  # Data parallelism on masked data: 4 micro-batches per step, however they are dealt.
  dp=(--set data.path="$work/odd.h5" --set train.max_steps=3)
  train 1 odd1 "${dp[@]}" --set train.grad_accum=4
  train 2 odd2 "${dp[@]}" --set train.grad_accum=2
  train 4 odd4 "${dp[@]}" --set train.grad_accum=1
  same_losses odd1 odd2
  same_losses odd1 odd4
  "$bin/checkpoint_diff" "$(latest odd1)" "$(latest odd2)" 1e-4 model/
  "$bin/checkpoint_diff" "$(latest odd1)" "$(latest odd4)" 1e-4 model/
  ;;
resume)
  # train.schedule = "tokens": max_steps stops a launch early without ending its LR schedule,
  # so that a run stopped at step 3 and resumed to step 6 trains what one launch of 6 steps does.
  common=(--set train.grad_accum=2 --set checkpoint.every_steps=3 --set log.samples=true --set train.schedule=tokens)
  train 2 straight "${common[@]}" --set train.max_steps=6
  train 2 split "${common[@]}" --set train.max_steps=3
  train 2 split "${common[@]}" --set train.max_steps=6 --resume auto
  grep -q "resumed from .*step-0*3.h5" "$work/split.log"
  "$bin/checkpoint_diff" "$(latest straight)" "$(latest split)" 0
  # metrics.jsonl: the resumed launch appends the curve where the first one stopped, and
  # its losses are the uninterrupted run's.
  python3 - "$work/straight/metrics.jsonl" "$work/split/metrics.jsonl" <<'PY'
import json, sys
straight, split = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert [m["step"] for m in split] == [1, 2, 3, 4, 5, 6], [m["step"] for m in split]
assert [m["launch"] for m in split] == [1, 1, 1, 2, 2, 2], [m["launch"] for m in split]
assert [m["tokens_total"] for m in split] == [m["tokens_total"] for m in straight]
for a, b in zip(straight, split):
    assert abs(a["loss"] - b["loss"]) <= 1e-6 * a["loss"], (a["step"], a["loss"], b["loss"])
PY
  # Resumed from step 3 once more, as after a crash past the last checkpoint: the report
  # reads the three launches as one run of steps 1..6, launch 2's steps 4..6 repeated, and
  # the plot draws the loss and tokens/s of each of those six steps.
  train 2 split "${common[@]}" --set train.max_steps=6 --resume "$work/split/step-00000003.h5"
  "$bin/topotrain-report" "$work/split" --plot "$work/split.svg" > "$work/split.report"
  for line in "launches 1, 2, 3 stitched into one run (2 ranks)" \
    "repeated: 3 steps ran again in a later launch (launch 2: 3 steps, 4..6)" \
    "role trainer (ranks 0,1): steps 1..6, 12 rank-steps"; do
    grep -qF "$line" "$work/split.report" || { cat "$work/split.report"; echo "report lacks: $line"; exit 1; }
  done
  python3 - "$work/split.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
lines = {l.get("class"): l.get("points").split() for l in ET.parse(sys.argv[1]).iter("{http://www.w3.org/2000/svg}polyline")}
assert sorted(lines) == ["loss", "tokens-per-second"], sorted(lines)
assert all(len(points) == 6 for points in lines.values()), lines
PY
  # That resume from step 3 abandoned launch 2's step-6 checkpoint: it was moved aside, so
  # that the new step 6 neither mixes with it nor loses to it in pruning, and `latest` names
  # the new one.
  aside="$work/split/superseded-after-step-00000003"
  grep -qF "abandons 1 later checkpoint of $work/split (step-00000006.h5): moved to $aside," "$work/split.log" ||
    { cat "$work/split.log"; echo "no word of the abandoned step-6 checkpoint"; exit 1; }
  [[ -f $aside/step-00000006.h5 && -f $work/split/step-00000006.h5 &&
     $(cat "$work/split/latest") == step-00000006.h5 ]] ||
    { ls -R "$work/split"; echo "the abandoned checkpoint was not moved aside"; exit 1; }
  # A damaged newest checkpoint: --resume auto falls back to the one before it, trains the same
  # steps again and moves the damaged file aside. Where no older checkpoint is left, the resume
  # stops with the fix.
  python3 "$(dirname "$0")/flip_bytes.py" "$work/split/step-00000006.h5"
  train 2 split "${common[@]}" --set train.max_steps=6 --resume auto
  for line in "step-00000006.h5 is corrupt: " "--resume auto falls back to $work/split/step-00000003.h5" \
    "moved to $aside-2,"; do
    grep -qF -- "$line" "$work/split.log" || { cat "$work/split.log"; echo "log lacks: $line"; exit 1; }
  done
  "$bin/checkpoint_diff" "$(latest straight)" "$(latest split)" 0
  train 2 lone "${common[@]}" --set train.max_steps=3
  python3 "$(dirname "$0")/flip_bytes.py" "$(latest lone)"
  if train 2 lone "${common[@]}" --set train.max_steps=6 --resume auto; then
    echo "a resume whose only checkpoint is damaged was not stopped"; exit 1
  fi
  grep -qF "$work/lone holds no older complete checkpoint to fall back to" "$work/lone.log" ||
    { echo "the failed resume does not say why"; exit 1; }
  # The same launch once more, after the run ended: it says that it trains nothing.
  train 2 split "${common[@]}" --set train.max_steps=5 --resume auto
  nothing="step-00000006.h5 is at step 6, [0-9]* tokens, where the run's length (.*) is reached: "
  grep -q "${nothing}this launch trains nothing" "$work/split.log" ||
    { cat "$work/split.log"; echo "no word that the resumed run trains nothing"; exit 1; }
  # Half the budget after step 3, up to at least the tokens the straight run trained.
  tokens=$(grep -Eo 'done: [0-9]+ steps, [0-9]+ tokens' "$work/straight.log" | awk '{print $4}')
  train 2 half "${common[@]}" --set train.max_steps=3
  train 2 half "${common[@]}" --set train.token_budget=128 --set train.max_tokens="$tokens" --resume auto
  changed="settings changed since $work/half/step-00000003.h5: train.token_budget 256 -> 128 (--set); "
  changed+="train.max_steps 3 -> 0 (default); train.max_tokens 0 -> $tokens (--set)"
  grep -qF "$changed" "$work/half.log" || { cat "$work/half.log"; echo "no line of the settings changed"; exit 1; }
  python3 - "$work/straight" "$work/half" <<'PY'
import sys, glob
def pieces(run):
    out = []
    for path in glob.glob(run + "/samples-rank-*.txt"):
        out += [tuple(map(int, line.split())) for line in open(path)]
    return out
def coverage(ps):  # sample -> sorted token ranges; fails on any overlap (a repeat)
    by = {}
    for s, b, e in ps: by.setdefault(s, []).append((b, e))
    for s, rs in by.items():
        rs.sort()
        for (b0, e0), (b1, e1) in zip(rs, rs[1:]):
            assert b1 >= e0, f"sample {s} tokens {b1}..{min(e0, e1)} trained twice"
    return by
straight, half = coverage(pieces(sys.argv[1])), coverage(pieces(sys.argv[2]))
for s, rs in straight.items():
    have = half.get(s, [])
    for b, e in rs:
        assert any(hb <= b and e <= he for hb, he in have) or sum(min(e, he) - max(b, hb) for hb, he in have if he > b and hb < e) == e - b, \
            f"sample {s} tokens {b}..{e} were skipped after the resume"
print(f"{sum(len(r) for r in straight.values())} pieces of the straight run all trained once after the resume")
PY
  ;;
tensorboard)
  common=(--set checkpoint.every_steps=2 --set log.tensorboard=true)
  train 2 tb "${common[@]}" --set train.max_steps=3
  train 2 tb "${common[@]}" --set train.max_steps=5 --resume auto
  /usr/bin/python3 "$(dirname "$0")/../read_tfevents.py" "$work"/tb/tensorboard/* >"$work/tb-events.jsonl"
  /usr/bin/python3 - "$work/tb-events.jsonl" "$work/tb/metrics.jsonl" <<'PY'
import json, sys
files = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda f: f["events"][0]["step"])
metrics = [json.loads(l) for l in open(sys.argv[2])]
assert len(files) == 2, [f["path"] for f in files]  # one per launch, rank 0's only
for launch, f in enumerate(files, 1):
    assert f["file_version"] == "brain.Event:2", f
    losses = {e["step"]: e["values"]["train/loss"] for e in f["events"] if "train/loss" in e["values"]}
    shared = {e["step"] for e in f["events"] if "phase/forward" in e["values"]}
    mine = {m["step"]: m["loss"] for m in metrics if m["launch"] == launch}
    assert sorted(losses) == sorted(mine) == sorted(shared), (launch, sorted(losses), sorted(mine), sorted(shared))
    for step, loss in mine.items():
        assert abs(losses[step] - loss) <= 1e-6 * abs(loss), (launch, step, losses[step], loss)
first, second = (sorted({e["step"] for e in f["events"]}) for f in files)
assert first == [1, 2, 3] and second == [4, 5], (first, second)
PY
  ;;
slow_checkpoint)
  # Steps of a fraction of a second against writes of 3 s: the checkpoint due at step 4
  # waits for step 2's write, and the first step after that write ends saves it.
  common=(--set train.grad_accum=2 --set checkpoint.every_steps=2 --set checkpoint.keep=10)
  train 2 plain "${common[@]}" --set train.max_steps=9
  TOPOTRAIN_FAULT_SLOW_CHECKPOINT=3 train 2 slow "${common[@]}" --set train.max_steps=9
  grep -q "checkpoint of step 4 deferred: the checkpoint of step 2 is still being written" "$work/slow.log" ||
    { echo "no deferral logged"; exit 1; }
  grep -Eq "snapshot held the host [0-9.]+ ms" "$work/slow.log" || { echo "no stall logged"; exit 1; }
  grep -q "checkpoint snapshots: .* GiB of host memory, allocated once" "$work/slow.log" ||
    { echo "the snapshot buffers are not announced"; exit 1; }
  [[ $(cat "$work/slow/latest") == step-00000009.h5 ]] || { echo "the final checkpoint is not the latest"; exit 1; }
  saved=$(ls "$work/slow" | grep -c '^step-.*\.h5$')
  (( saved >= 2 && saved < 5 )) || { echo "expected 2 to 4 checkpoints (some deferred), found $saved"; exit 1; }
  "$bin/checkpoint_diff" "$(latest plain)" "$(latest slow)" 0
  # The report sets the steps that ended beside a write against the others; the ranks agree
  # on the flag (an even count of rank-steps), and steps 1 and 2 ran before any write.
  "$bin/topotrain-report" "$work/slow" > "$work/slow.report"
  beside=$(grep -Eo "beside a checkpoint write: [0-9]+ of 18 rank-steps" "$work/slow.report" | grep -Eo "[0-9]+ of" |
    cut -d' ' -f1)
  [[ -n $beside ]] && (( beside >= 2 && beside <= 14 && beside % 2 == 0 )) ||
    { cat "$work/slow.report"; echo "no, or an odd, count of steps beside a write: '$beside'"; exit 1; }
  # Resume from the newest checkpoint before the last (a deferred one) and finish alike.
  middle=$(ls "$work/slow" | grep '^step-.*\.h5$' | sort | tail -2 | head -1)
  rm "$work/slow/step-00000009.h5" && echo "$middle" > "$work/slow/latest"
  train 2 slow "${common[@]}" --set train.max_steps=9 --resume auto
  grep -q "resumed from .*$middle" "$work/slow.log" || { echo "did not resume from $middle"; exit 1; }
  "$bin/checkpoint_diff" "$(latest plain)" "$(latest slow)" 0
  ;;
oom)
  export TOPOTRAIN_FAULT_OOM=1:3
  if train 4 oom --set train.grad_accum=2 --set checkpoint.every_steps=2 --set train.max_steps=5; then
    echo "expected the run to fail"; exit 1
  fi
  grep -q "out of memory on rank 1 at step 3 with train.token_budget = 256" "$work/oom.log"
  command=$(grep -Eo "mpirun -np 4 moe_train .*--set train.token_budget=128 --resume auto" "$work/oom.log")
  unset TOPOTRAIN_FAULT_OOM
  # The printed command, run from the binary directory: it resumes from the step-2 checkpoint.
  command=${command#mpirun }
  eval "timeout 300 ${mpirun[*]} ${command/moe_train/$bin/moe_train}" >"$work/resumed.log" 2>&1 || { cat "$work/resumed.log"; exit 1; }
  grep -q "resumed from .*step-0*2.h5" "$work/resumed.log"
  grep -q "done: 5 steps" "$work/resumed.log"
  export TOPOTRAIN_FAULT_OOM=1:3
  train 4 shrink --set train.grad_accum=2 --set train.max_steps=4 --set train.oom=shrink --set log.samples=true
  grep -q "retrying the step with token_budget 128" "$work/shrink.log"
  grep -q "done: 4 steps" "$work/shrink.log"
  # The discarded step trained nothing: log.samples lists no token of it twice.
  cat "$work"/shrink/samples-rank-*.txt | sort -n -k1,1 -k2,2 | awk '
    NR > 1 && $1 == s && $2 < e { print "sample " $1 " tokens " $2 ".." e " listed twice"; bad = 1 }
    NR == 1 || $1 != s { s = $1; e = $3; next }
    $3 > e { e = $3 }
    END { exit bad }'
  ;;
nonfinite)
  export TOPOTRAIN_FAULT_NONFINITE=1:3
  code=0
  timeout 300 "${mpirun[@]}" -np 2 "$bin/moe_train" "$(topology 2)" --set train.token_budget=256 \
    --set checkpoint.dir="$work" --set checkpoint.run=nan --set checkpoint.every_steps=2 --set train.max_steps=5 \
    >"$work/nan.log" 2>&1 || code=$?
  [[ $code -eq 4 ]] || { cat "$work/nan.log"; echo "exit $code, expected 4"; exit 1; }
  [[ $(grep -c "the loss on rank 1 (trainer) is not finite at step 3; no trainer applied it" "$work/nan.log") -eq 1 ]] ||
    { cat "$work/nan.log"; echo "expected one message naming rank 1 and step 3"; exit 1; }
  [[ $(cat "$work/nan/latest") == step-00000002.h5 ]] || { echo "the last checkpoint is not step 2's"; exit 1; }
  # Skipped: step 3 changes no weight and no AdamW moment. Its checkpoint (the last step's)
  # and step 2's (the first at the cadence) are written whatever the writer's pace: a
  # checkpoint due while another is being written would be deferred.
  train 2 skip --set train.skip_nonfinite=true --set checkpoint.every_steps=2 --set checkpoint.keep=10 \
    --set train.max_steps=3
  grep -q "not finite at step 3; train.skip_nonfinite: step skipped (1 so far)" "$work/skip.log"
  grep -q "done: 3 steps, [0-9]* tokens (1 steps skipped as not finite)" "$work/skip.log"
  "$bin/checkpoint_diff" "$work/skip/step-00000002.h5" "$work/skip/step-00000003.h5" 0 model/
  "$bin/checkpoint_diff" "$work/skip/step-00000002.h5" "$work/skip/step-00000003.h5" 0 optim/ >"$work/skip.diff"
  grep -q "^optimizer_steps: 2 and 2$" "$work/skip.diff" || { cat "$work/skip.diff"; exit 1; }
  # One rank alone enqueues its update before reading the step's values, and the device
  # skips it: the same outcome, AdamW's step count (the next bias correction) taken back.
  TOPOTRAIN_FAULT_NONFINITE=0:3 train 1 skip1 --set train.skip_nonfinite=true --set checkpoint.every_steps=2 \
    --set checkpoint.keep=10 --set train.max_steps=3
  grep -q "not finite at step 3; train.skip_nonfinite: step skipped (1 so far)" "$work/skip1.log"
  "$bin/checkpoint_diff" "$work/skip1/step-00000002.h5" "$work/skip1/step-00000003.h5" 0 model/
  "$bin/checkpoint_diff" "$work/skip1/step-00000002.h5" "$work/skip1/step-00000003.h5" 0 optim/ >"$work/skip1.diff"
  grep -q "^optimizer_steps: 2 and 2$" "$work/skip1.diff" || { cat "$work/skip1.diff"; exit 1; }
  ;;
stop)
  stop_on_signal "$work/stop.log" "${mpirun[@]}" -np 2 "$bin/moe_train" "$(topology 2)" --set model.preset=tiny-moe \
    --set train.token_budget=256 --set log.every=1 --set train.max_steps=100000 --set checkpoint.dir="$work" \
    --set checkpoint.run=stop
  step=$(grep -Eo 'stopped on request after step [0-9]+' "$work/stop.log" | awk '{print $NF}')
  [[ -n $step && -f $work/stop/step-$(printf '%08d' "$step").h5 ]] || { cat "$work/stop.log"; exit 1; }
  echo "stopped after step $step with its checkpoint"
  # SIGTERM (what a scheduler's time limit or scancel sends) stops alike, but Open MPI's mpirun
  # reports a job it was told to terminate as failed: exit 1, every rank having exited 0.
  STOP_SIGNAL=TERM STOP_EXIT=1 stop_on_signal "$work/term.log" "${mpirun[@]}" -np 2 "$bin/moe_train" "$(topology 2)" \
    --set model.preset=tiny-moe --set train.token_budget=256 --set log.every=1 --set train.max_steps=100000 \
    --set checkpoint.dir="$work" --set checkpoint.run=term
  step=$(grep -Eo 'stopped on request after step [0-9]+' "$work/term.log" | awk '{print $NF}')
  [[ -n $step && -f $work/term/step-$(printf '%08d' "$step").h5 ]] || { cat "$work/term.log"; exit 1; }
  grep -q "MPI_ABORT\|exited with non-zero status" "$work/term.log" && { cat "$work/term.log"; exit 1; }
  ;;
epochs)
  "$bin/topotrain-prepare" -q --split paragraph -o "$work/small.h5" /usr/share/common-licenses/Apache-2.0 >/dev/null
  dataset_tokens=11325  # 33 paragraphs of the Apache License 2.0, byte tokens (dflash_train_e2e.sh: the same)
  # trained_times RUN EPOCHS: every (sample, position) of the dataset is in the sample log
  # of RUN exactly EPOCHS times, and the run's end line counts those tokens.
  trained_times() {
    local run=$1 epochs=$2
    awk '{ for (i = $2; i < $3; ++i) n[$1 " " i]++ }
         END { for (k in n) { c[n[k]]++; total += n[k] } for (t in c) printf "%d tokens %d time(s); ", c[t], t
               print "total " total }' "$work/$run"/samples-rank-*.txt > "$work/$run.counts"
    grep -qx "$dataset_tokens tokens $epochs time(s); total $((epochs * dataset_tokens))" "$work/$run.counts" ||
      { cat "$work/$run.counts"; echo "$run: expected each of the $dataset_tokens tokens $epochs time(s)"; exit 1; }
    grep -q "done: [0-9]* steps, $((epochs * dataset_tokens)) tokens" "$work/$run.log" ||
      { grep "done:" "$work/$run.log"; echo "$run: the end line does not count $epochs pass(es)"; exit 1; }
  }
  pass=(--set data.path="$work/small.h5" --set train.max_steps=0 --set train.grad_accum=3 --set log.samples=true
        --set log.every=100)
  train 2 one "${pass[@]}" --set train.token_budget=700 --set train.epochs=1
  trained_times one 1
  train 2 two "${pass[@]}" --set train.token_budget=700 --set train.epochs=2
  trained_times two 2
  # One micro-batch holds at most one pass: 2 epochs are 2 micro-batches, whatever the budget.
  train 2 huge "${pass[@]}" --set train.token_budget=30000 --set train.epochs=2
  trained_times huge 2
  grep -q "train.token_budget = 30000 is larger than the whole dataset" "$work/huge.log" ||
    { cat "$work/huge.log"; echo "no warning about a budget larger than the dataset"; exit 1; }
  [[ $(cat "$work"/huge/samples-rank-*.txt | wc -l) -eq 66 ]] || { echo "expected 2 x 33 pieces"; exit 1; }
  ;;
nodes)
  # The README's several-node launch line on one node: a hostfile, ranks mapped by slot,
  # TCP between the ranks, -x for the environment.
  printf 'localhost slots=4\n' > "$work/hosts"
  common=(--set train.grad_accum=2 --set train.max_steps=3)
  train 4 one-node "${common[@]}"
  timeout 300 mpirun --allow-run-as-root --bind-to none --hostfile "$work/hosts" --map-by slot --mca btl self,tcp \
    -x OMP_NUM_THREADS -x TOPOTRAIN_NODE_CHECK=1 \
    -np 4 sh -c 'echo "rank $OMPI_COMM_WORLD_RANK local $OMPI_COMM_WORLD_LOCAL_RANK node-check $TOPOTRAIN_NODE_CHECK"; \
      exec "$0" "$@"' "$bin/moe_train" "$(topology 4)" \
    --set model.preset=tiny-moe --set train.token_budget=256 --set train.lr=1e-2 --set train.warmup=0 \
    --set log.every=1 --set checkpoint.dir="$work" --set checkpoint.run=hostfile "${common[@]}" \
    > "$work/hostfile.log" 2>&1 || { cat "$work/hostfile.log"; exit 1; }
  for rank in 0 1 2 3; do
    grep -q "^rank $rank local $rank node-check 1$" "$work/hostfile.log" ||
      { echo "rank $rank: not placed or without the forwarded environment"; cat "$work/hostfile.log"; exit 1; }
  done
  grep -q "done: 3 steps" "$work/hostfile.log"
  "$bin/checkpoint_diff" "$(latest one-node)" "$(latest hostfile)" 0
  # Two nodes of two ranks, emulated: mpirun starts node-b's daemon through an rsh agent
  # that runs it on this machine (as node-b, where the kernel gives it a UTS namespace).
  printf 'node-a slots=2\nnode-b slots=2\n' > "$work/hosts-two-nodes"
  two_nodes=("${mpirun[@]}" --hostfile "$work/hosts-two-nodes" --map-by ppr:2:node --mca btl self,tcp
             --mca plm_rsh_agent "$(cd "$(dirname "$0")" && pwd)/emulated_node_agent.sh" -x OMP_NUM_THREADS)
  named=0
  unshare --uts true 2>/dev/null && named=1
  timeout 300 "${two_nodes[@]}" -np 4 sh -c 'echo "rank $OMPI_COMM_WORLD_RANK local $OMPI_COMM_WORLD_LOCAL_RANK"; \
      exec "$0" "$@"' "$bin/moe_train" "$(topology 4)" \
    --set model.preset=tiny-moe --set train.token_budget=256 --set train.lr=1e-2 --set train.warmup=0 \
    --set log.every=1 --set checkpoint.dir="$work" --set checkpoint.run=two-nodes "${common[@]}" \
    > "$work/two-nodes.log" 2>&1 || { cat "$work/two-nodes.log"; exit 1; }
  for rank in 0 1 2 3; do  # node-local ranks 0 1 on each node
    grep -q "^rank $rank local $((rank % 2))$" "$work/two-nodes.log" ||
      { echo "rank $rank: not node-local rank $((rank % 2))"; cat "$work/two-nodes.log"; exit 1; }
  done
  if ((named)); then
    for rank in 2 3; do
      grep -qP "^$rank\ttrainer\tcpu\tnode-b$" "$work/two-nodes.log" || { cat "$work/two-nodes.log"; exit 1; }
    done
  fi
  "$bin/checkpoint_diff" "$(latest one-node)" "$(latest two-nodes)" 0
  # Node-local GPU choice: a GPU topology without devices places each node's ranks on its
  # cuda:0 and cuda:1 (a dry run, which shows the placement without a GPU).
  printf '[topology]\nname = "two-by-two"\ninterconnect = "pcie4"\n[[roles]]\nrole = "trainer"\nranks = [0, 1, 2, 3]\n' \
    > "$work/gpus.toml"
  timeout 300 "${two_nodes[@]}" -np 4 "$bin/moe_train" "$work/gpus.toml" --dry-run > "$work/gpus.log" 2>&1 ||
    { cat "$work/gpus.log"; exit 1; }
  for rank in 0 1 2 3; do
    grep -qP "^$rank\ttrainer\tcuda:$((rank % 2))\t" "$work/gpus.log" || { cat "$work/gpus.log"; exit 1; }
  done
  # A checkpoint.dir node-b does not share (an empty directory there): the resume stops every
  # rank, naming node-b's ranks and the fix, instead of resuming some and starting others.
  if ((named)) && unshare --mount true 2>/dev/null; then
    if EMULATED_PRIVATE_DIR="$work/two-nodes" EMULATED_FIRST_NODE=node-a timeout 300 "${two_nodes[@]}" -np 4 \
      "$bin/moe_train" "$(topology 4)" --set model.preset=tiny-moe --set train.token_budget=256 \
      --set checkpoint.dir="$work" --set checkpoint.run=two-nodes --set train.max_steps=5 --resume auto \
      > "$work/private.log" 2>&1; then
      cat "$work/private.log"; echo "expected the resume from a directory node-b lacks to fail"; exit 1
    fi
    grep -q "rank 2 on node-b: --resume cannot read $work/two-nodes/step-00000003.h5, the checkpoint the group's first rank resumes from; checkpoint.dir must be a directory every node shares" \
      "$work/private.log" || { cat "$work/private.log"; exit 1; }
  else
    echo "no UTS or mount namespace here: the unshared checkpoint.dir case is not emulated"
  fi
  ;;
eval)
  held=(--set data.eval_fraction=0.2 --set train.eval_every=2 --set checkpoint.every_steps=2)
  train 2 held "${held[@]}" --set train.max_steps=5
  for step in 2 4 5; do
    grep -Eq "held-out loss after step $step: [0-9.]+ \(perplexity [0-9.]+\) over [0-9]+ targets of [0-9]+ documents" \
      "$work/held.log" || { echo "no held-out loss after step $step"; cat "$work/held.log"; exit 1; }
  done
  grep -q "held out .* documents .* for evaluation (data.eval_fraction = 0.2)" "$work/held.log"
  python3 - "$work/held/metrics.jsonl" <<'PY'
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
evaluated = [m["step"] for m in lines if "eval_loss" in m]
assert evaluated == [2, 4, 5], evaluated
assert all(math.isfinite(m["eval_loss"]) and m["eval_loss"] > 0 for m in lines if "eval_loss" in m)
# tiny-moe routes top-2 of 8 experts: the peak expert load lies in [1, 8 / 2] on every step
# (fp32 on the way: 4 may come out a few ulps above).
assert all(1.0 <= m["peak_expert_load"] <= 4.0 + 1e-6 for m in lines), [m.get("peak_expert_load") for m in lines]
PY
  if train 2 held "${held[@]}" --set data.eval_fraction=0.3 --set train.max_steps=7 --resume auto; then
    echo "a resume holding out another share of the documents was not refused"; exit 1
  fi
  grep -q "was trained on [0-9]* documents of [0-9]* tokens (.*), but this launch trains on [0-9]*" "$work/held.log"
  # Another train.seed draws other held-out documents, as many of them: refused too.
  if train 2 held "${held[@]}" --set train.seed=99 --set train.max_steps=7 --resume auto; then
    echo "a resume whose train.seed draws other held-out documents was not refused"; exit 1
  fi
  refused="less data.eval_fraction = 0.2 drawn by train.seed = 99.*"
  refused+="resume with the data.path, data.eval_fraction and train.seed it was trained with"
  grep -q "$refused" "$work/held.log" || { cat "$work/held.log"; exit 1; }
  train 2 held "${held[@]}" --set train.max_steps=6 --resume auto
  grep -q "held-out loss after step 6" "$work/held.log"
  ;;
epoch)
  "$bin/topotrain-prepare" -q --split paragraph -o "$work/small.h5" /usr/share/common-licenses/Apache-2.0 >/dev/null
  train 2 epoch --set data.path="$work/small.h5" --set train.max_steps=0 --set train.token_budget=1024 \
    --set log.every=2 --set checkpoint.every_steps=2
  steps=$(grep -Eo 'done: [0-9]+ steps' "$work/epoch.log" | awk '{print $2}')
  (( steps >= 4 )) || { cat "$work/epoch.log"; echo "expected at least 4 steps in the epoch"; exit 1; }
  line='\[rank 0 trainer\] step 2 \| loss [0-9.]+ aux [0-9.]+ load [0-9.]+ \| lr [0-9.]+e-[0-9]+ \| gnorm [0-9.e+-]+ \| [0-9.]+ [KM]?tok/s \([0-9.]+ [KM]?tok/s per rank\) \| comm [0-9]+% \| [0-9]+ coll \| rss [0-9.]+ GiB \| ETA [0-9]'
  grep -Eq "$line" "$work/epoch.log" || { cat "$work/epoch.log"; echo "no progress line with an ETA at step 2"; exit 1; }
  grep -q "\] step $steps | loss" "$work/epoch.log"
  log=$work/epoch/log.txt
  stamp='[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} \[rank 0 trainer\]'
  grep -Eq "^$stamp dataset $work/small.h5: [0-9]+ documents, 11325 tokens, loaded in [0-9.]+ s$" "$log" ||
    { cat "$log"; exit 1; }
  # Every checkpoint due is written or, while the previous one is still being written,
  # deferred; the last step's is always written.
  written="written: [0-9.]+ GiB in [0-9.]+ s; the snapshot held the host [0-9.]+ ms$"
  for step in $(seq 2 2 "$steps") "$steps"; do
    grep -Eq "^$stamp checkpoint $work/epoch/step-$(printf '%08d' "$step").h5 $written" "$log" ||
      { [[ $step != "$steps" ]] && grep -Eq "^$stamp checkpoint of step $step deferred" "$log"; } ||
      { cat "$log"; echo "no line for the checkpoint of step $step"; exit 1; }
  done
  grep -Eq "^$stamp done: $steps steps" "$log"
  "$bin/topotrain-report" "$work/epoch" | grep -q "role trainer (ranks 0,1): steps 1..$steps, $((2 * steps)) rank-steps"
  # Another dataset of as many documents (33) is no continuation of this one's data position.
  for i in $(seq 33); do printf '{"text": "document %d %*s"}\n' "$i" "$i" x; done > "$work/other.jsonl"
  "$bin/topotrain-prepare" -q -o "$work/other.h5" "$work/other.jsonl" >/dev/null
  if train 2 epoch --set data.path="$work/other.h5" --set train.epochs=2 --resume auto; then
    echo "a resume on another dataset of as many documents was not refused"; exit 1
  fi
  refused="was trained on 33 documents of 11325 tokens ($work/small.h5), "
  refused+="but this launch trains on 33 documents of [0-9]* tokens ($work/other.h5)"
  grep -q "$refused" "$work/epoch.log" || { cat "$work/epoch.log"; exit 1; }
  # The same text with other letters: documents of the same count and lengths, other tokens.
  tr 'a-y' 'b-z' < /usr/share/common-licenses/Apache-2.0 > "$work/shifted.txt"
  "$bin/topotrain-prepare" -q --split paragraph -o "$work/shifted.h5" "$work/shifted.txt" >/dev/null
  if train 2 epoch --set data.path="$work/shifted.h5" --set train.epochs=2 --resume auto; then
    echo "a resume on a dataset of the same lengths but other tokens was not refused"; exit 1
  fi
  grep -q "but this launch trains on 33 documents of 11325 tokens ($work/shifted.h5); documents of the same lengths, but other tokens" \
    "$work/epoch.log" || { cat "$work/epoch.log"; exit 1; }
  ;;
launches)
  # A launch prints a start block, not the ~60 settings: those go to settings.toml (this
  # job's keys only, as TOML a --config takes), one file per launch. Three launches, the
  # second training nothing (resumed at its end): metrics.jsonl, timings.h5 and the report
  # all number the third launch 3. The last step of a max_steps run trains at the floor of
  # the LR schedule (train.schedule = "run"), where train.schedule = "tokens" keeps the old
  # schedule over the epochs. log.level = "warn" keeps the progress lines. A refused launch's
  # reason is the last line of log.txt.
  train 2 runs --set train.max_steps=3 --set train.lr=2e-3 --set train.min_lr_ratio=0.1
  stamp='[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} \[rank 0 trainer\]'
  for line in "moe_train launch 1 of $work/runs, fresh" \
    "  model     model preset 'tiny-moe' \(Qwen3-MoE, 3 layers, hidden 64\): [0-9.]+K parameters, [0-9.]+K active per token" \
    "  data      [^ ]+: [0-9]+ documents, [0-9]+ tokens" \
    "  budget    2 ranks x 1 micro-batches of 256 tokens = 512 tokens per step" \
    "  length    1 epoch\(s\) or 3 steps, whichever comes first; LR schedule over the run: 3 steps, or [0-9]+ tokens if they come first" \
    "  watchdog  a stalled rank is named after 10m00s \(20m00s on a process's first step and around checkpoints; train.hang_timeout_s\)" \
    "  settings  $work/runs/settings.toml"; do
    grep -Eq "^$stamp $line\$" "$work/runs.log" || { cat "$work/runs.log"; echo "no start line: $line"; exit 1; }
  done
  grep -q "resolved settings" "$work/runs.log" && { cat "$work/runs.log"; echo "a launch printed the settings"; exit 1; }
  (( $(wc -l < "$work/runs.log") < 25 )) || { cat "$work/runs.log"; echo "a long start"; exit 1; }
  train 2 runs --set train.max_steps=3 --set train.lr=2e-3 --set train.min_lr_ratio=0.1 --resume auto
  grep -q "this launch trains nothing" "$work/runs.log" || { cat "$work/runs.log"; exit 1; }
  train 2 runs --set train.max_steps=5 --set train.lr=2e-3 --set train.min_lr_ratio=0.1 --resume auto \
    --set log.level=warn
  grep -Eq "^$stamp step 5 \| loss " "$work/runs.log" || { cat "$work/runs.log"; echo "log.level = warn hid progress"; exit 1; }
  grep -q "moe_train launch" "$work/runs.log" && { cat "$work/runs.log"; echo "log.level = warn printed info"; exit 1; }
  # The report reads timings.h5's launch numbers.
  "$bin/topotrain-report" "$work/runs" > "$work/runs.report"
  grep -Eq "^  3 +2 \(2 trainer\) +4\.\.5 " "$work/runs.report" || { cat "$work/runs.report"; exit 1; }
  "$bin/moe_train" "$(topology 2)" --print-settings > "$work/printed.toml"
  /usr/bin/python3 - "$work/runs" "$work/printed.toml" <<'PY'
import json, sys, tomllib
run, printed = sys.argv[1:]
lines = [json.loads(l) for l in open(run + "/metrics.jsonl")]
assert [(m["step"], m["launch"]) for m in lines] == [(1, 1), (2, 1), (3, 1), (4, 3), (5, 3)], lines
# max_steps ends the run: its last step trains at the floor's neighbourhood, 2e-4 of a 2e-3 peak.
assert lines[2]["lr"] < 2e-4 + 0.3 * 1.8e-3, lines[2]["lr"]
assert abs(lines[4]["lr"] - 2e-4) < 0.1 * 1.8e-3, lines[4]["lr"]
with open(run + "/settings.toml", "rb") as f:
    text = f.read().decode()
assert text.startswith("# moe_train launch 3:"), text[:80]
settings = tomllib.loads(text)
assert settings["train"]["max_steps"] == 5 and settings["log"]["level"] == "warn", settings["train"]
for earlier in (1, 2):
    first = open(f"{run}/settings.launch-{earlier}.toml").readline()
    assert first.startswith(f"# moe_train launch {earlier}:"), first
# Every key moe_train reads, none of dflash_train's alone.
keys = {f"{table}.{key}" for table, values in tomllib.loads(open(printed).read()).items() for key in values}
assert "train.anchors" not in keys and "model.draft_layers" not in keys, keys
assert {"train.lr", "train.schedule", "log.level", "checkpoint.keep"} <= keys, keys
PY
  # train.schedule = "tokens": the schedule of before, over the epoch, which max_steps cuts short.
  train 2 old --set train.max_steps=3 --set train.lr=2e-3 --set train.schedule=tokens
  /usr/bin/python3 - "$work/old/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert lines[-1]["lr"] > 1.9e-3, lines[-1]["lr"]
PY
  # A refused launch (a fresh start in a run directory with checkpoints) ends log.txt with why.
  if train 2 runs --set train.max_steps=5 --set log.profile_step=9; then echo "a fresh start was not refused"; exit 1; fi
  tail -1 "$work/runs/log.txt" | grep -Eq "^$stamp error: $work/runs already holds the checkpoints of a run" ||
    { tail -3 "$work/runs/log.txt"; echo "log.txt does not end with the refusal"; exit 1; }
  ;;
auto)
  auto=(--set train.token_budget=auto --set train.max_steps=4 --set checkpoint.every_steps=2)
  if train 2 tiny "${auto[@]}" --set train.memory_limit=1048576; then
    echo "expected a 1 MiB train.memory_limit to be refused"; exit 1
  fi
  grep -q 'train.token_budget = "auto": not even a micro-batch of 128 tokens fits train.memory_fraction = 0.9 of 1.0 MiB (train.memory_limit) on one of the ranks' "$work/tiny.log"
  # What a rank holds before any micro-batch, as that message says, plus room for the
  # activations of about a thousand tokens: the limit that the measured choice must obey.
  held=$(grep -Eo 'the fullest trainer holds [0-9.]+ [MG]iB' "$work/tiny.log" | head -1 | awk '{ print $5 * ($6 == "GiB" ? 1024 : 1) }')
  limit=$(awk -v held="$held" 'BEGIN { printf "%d", (held + 48) * 1048576 / 0.9 }')
  train 2 auto "${auto[@]}" --set train.memory_limit="$limit"
  budget=$(grep -Eo 'train.token_budget = "auto": [0-9]+ tokens per micro-batch' "$work/auto.log" | awk '{ print $4 }')
  if [[ -z $budget ]] || ((budget < 128 || budget > 16384 || budget % 128 != 0)); then
    echo "expected a multiple of 128 well below the dataset's size, got '$budget'"; cat "$work/auto.log"; exit 1
  fi
  grep -q "micro-batches of $budget tokens" "$work/auto.log"
  grep -q "done: 4 steps" "$work/auto.log"
  train 2 fixed --set train.token_budget="$budget" --set train.max_steps=4 --set checkpoint.every_steps=2
  "$bin/checkpoint_diff" "$(latest auto)" "$(latest fixed)" 0
  diff <(losses auto) <(losses fixed)
  # A resume measures again (not a stored number) and trains on from the checkpoint.
  train 2 auto "${auto[@]}" --set train.memory_limit="$limit" --set train.max_steps=5 --resume auto
  grep -q 'resumed from .*step-0*4.h5' "$work/auto.log"
  grep -Eq 'train.token_budget = "auto": [0-9]+ tokens per micro-batch' "$work/auto.log"
  grep -q "done: 5 steps" "$work/auto.log"
  # An out-of-memory shrinks by the measure, train.oom left unset: the CPU knows no failing
  # peak, so 0.9x of what this launch measured (a resident set varies a little by launch).
  export TOPOTRAIN_FAULT_OOM=1:2
  train 2 shrink "${auto[@]}" --set train.memory_limit="$limit"
  unset TOPOTRAIN_FAULT_OOM
  budget=$(grep -Eo 'train.token_budget = "auto": [0-9]+ tokens per micro-batch' "$work/shrink.log" | awk '{ print $4 }')
  shrunk=$(awk -v b="$budget" 'BEGIN { s = int(b * 0.9); if (s >= 128) s = int(s / 128) * 128; print s }')
  grep -q "retrying the step with token_budget $shrunk (what the failing step's peak leaves room for" "$work/shrink.log"
  grep -q "done: 4 steps" "$work/shrink.log"
  ;;
disk_full_sizes)
  full=$work/full
  mkdir -p "$full"
  if ! mount -t tmpfs -o size=4k tmpfs "$full" 2>/dev/null; then
    echo "cannot mount a tmpfs here (not root, or in a container without the capability): nothing checked"; exit 0
  fi
  umount "$full"
  trap 'mountpoint -q "$full" && umount "$full"; rm -rf "$work"' EXIT
  failed=0
  for kib in 4 8 12 16 20 24 28 48 160 464 640; do
    mount -t tmpfs -o size=${kib}k tmpfs "$full"
    code=0
    timeout 300 "${mpirun[@]}" -np 1 "$bin/moe_train" "$(topology 1)" --set model.preset=tiny-moe \
      --set train.token_budget=256 --set train.max_steps=6 --set log.every=1 --set checkpoint.every_steps=-1 \
      --set checkpoint.dir="$full" --set checkpoint.run=run >"$work/$kib.log" 2>&1 || code=$?
    if [[ $code != 0 ]]; then
      failed=$((failed + 1))
      grep -q "No space left on device (ENOSPC)" "$work/$kib.log" ||
        { cat "$work/$kib.log"; echo "at $kib KiB: exit $code without the OS's reason"; exit 1; }
    fi
    left=$(find "$full" -name '*.tmp' -o -name '*.start')
    [[ -z $left ]] || { cat "$work/$kib.log"; ls -la "$full/run"; echo "at $kib KiB: left behind: $left"; exit 1; }
    umount "$full"
  done
  # The sizes cover the timing log's copy (the path that once gave no reason) and a launch that fits.
  grep -q "timing log: cannot copy .*: No space left on device (ENOSPC)" "$work"/*.log ||
    { echo "no size met the timing log's copy"; exit 1; }
  (( failed < 11 )) || { cat "$work/640.log"; echo "no launch fitted in 640 KiB"; exit 1; }
  ;;
edited_data)
  python=$(source launch/torch.sh && topotrain_torch_python) && "$python" -c 'import h5py' ||
    { echo "this scenario edits a dataset with h5py, which ci/setup.sh installs into the venv"; exit 1; }
  edit() {  # edit FILE STATEMENT: runs STATEMENT with f (the h5py file) and t (its tokens), then writes t back
    "$python" - "$@" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    t = f["tokens"][...]
    exec(sys.argv[2])
    f["tokens"][...] = t
PY
  }
  refused() {  # refused DATA RUN [args...]: moe_train on DATA must exit 2; output in $work/RUN.log
    local data=$1 run=$2 code=0
    shift 2
    timeout 300 "${mpirun[@]}" -np 1 "$bin/moe_train" "$(topology 1)" --set model.preset=tiny-moe \
      --set train.token_budget=256 --set checkpoint.dir="$work" --set checkpoint.run="$run" \
      --set data.path="$data" "$@" >"$work/$run.log" 2>&1 || code=$?
    [[ $code == 2 ]] || { cat "$work/$run.log"; echo "exit $code on $data, expected 2"; exit 1; }
  }
  cp "$bin/../data/demo.h5" "$work/data.h5"
  train 1 edited --set data.path="$work/data.h5" --set train.max_steps=10 --set checkpoint.every_steps=10
  fix="restore the file the run was started with, or re-run topotrain-prepare to write it again"
  cp "$work/data.h5" "$work/flipped.h5"
  edit "$work/flipped.h5" 't[70000] ^= 1'
  refused "$work/flipped.h5" flipped --set train.max_steps=10
  grep -q "dataset file '$work/flipped.h5': its tokens do not match the checksum stored with them.*: 1 of its [0-9]* chunks of 65536 tokens differ: tokens 65536..131071 (chunk 2)\. .*$fix" \
    "$work/flipped.log" || { cat "$work/flipped.log"; echo "no refusal naming the file, the chunk and the fix"; exit 1; }
  edit "$work/data.h5" 't[:] = (t + 1) % 259'
  refused "$work/data.h5" edited --set train.max_steps=12 --resume auto
  grep -q "dataset file '$work/data.h5': its tokens do not match.*: \([0-9]*\) of its \1 chunks of 65536 tokens differ: tokens 0..65535 (chunk 1), .*$fix" \
    "$work/edited.log" || { cat "$work/edited.log"; echo "no refusal naming the file, every chunk and the fix"; exit 1; }
  edit "$work/data.h5" 'del f.attrs["tokens_crc32c"]; del f["tokens_chunk_crc32c"]'
  refused "$work/data.h5" edited --set train.max_steps=12 --resume auto
  grep -q "documents of the same lengths, but other tokens (token checksum" "$work/edited.log" ||
    { cat "$work/edited.log"; echo "the resume on the edited file was not refused by the checkpoint's record"; exit 1; }
  ;;
*) echo "unknown scenario $scenario"; exit 2 ;;
esac
echo "PASS $scenario"
