#!/usr/bin/env bash
# End-to-end check of topotrain-speculate on CPU (tests/infer/CMakeLists.txt runs it):
#   topotrain_speculate_e2e.sh BIN_DIR
# A tiny-dense target trained 2 steps by moe_train and a drafter trained 2 steps against it by
# dflash_train (run directories, as users pass them) decode JSONL prompts and a dataset's
# assistant turns: exit 0, lossless, the JSON's numbers equal the text's, --responses holds each
# prompt's ids and responses and as many acceptance lengths as verifications. Bad input exits 2
# naming the file: an empty prompt file, an empty prompt, a dataset without a loss mask, a
# token id outside the vocabulary, a missing file, the drafter given as the target and the
# target given as the drafter.
set -euo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --oversubscribe --allow-run-as-root --bind-to none)

"$bin/topotrain-prepare" -q --split paragraph -o "$work/small.h5" /usr/share/common-licenses/Apache-2.0 >/dev/null
printf '[topology]\nname = "one"\ninterconnect = "cpu"\n[[roles]]\nrole = "trainer"\nranks = [0]\ndevices = "cpu"\n' \
  > "$work/one.toml"
printf '[topology]\nname = "cpu-1t1d"\ninterconnect = "cpu"\n[[roles]]\nrole = "target"\nranks = [0]\ndevices = "cpu"\n[[roles]]\nrole = "drafter"\nranks = [1]\ndevices = "cpu"\n' \
  > "$work/1t1d.toml"
common=(--set data.path="$work/small.h5" --set model.preset=tiny-dense --set train.token_budget=256
        --set train.max_steps=2 --set checkpoint.dir="$work")
timeout 300 "${mpirun[@]}" -np 1 "$bin/moe_train" "$work/one.toml" "${common[@]}" --set checkpoint.run=target \
  > "$work/target.log" 2>&1 || { cat "$work/target.log"; exit 1; }
# A target of another width than the drafter's: refused as its drafter's target.
printf '{"model_type": "qwen3", "vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "tie_word_embeddings": true}\n' \
  > "$work/narrow.json"
timeout 300 "${mpirun[@]}" -np 1 "$bin/moe_train" "$work/one.toml" "${common[@]}" --set checkpoint.run=narrow \
  --set model.config="$work/narrow.json" > "$work/narrow.log" 2>&1 || { cat "$work/narrow.log"; exit 1; }
timeout 300 "${mpirun[@]}" -np 2 "$bin/dflash_train" "$work/1t1d.toml" "${common[@]}" --set checkpoint.run=drafter \
  --set model.weights="$work/target" --set model.draft_layers=1 --set model.taps=1 --set model.block_size=4 \
  > "$work/drafter.log" 2>&1 || { cat "$work/drafter.log"; exit 1; }

# speculate ARGS...: topotrain-speculate of $target (default: the target) and $drafter (the
# drafter), output in $work/out.txt
speculate() {
  "$bin/topotrain-speculate" --target "${target:-$work/target}" --drafter "${drafter:-$work/drafter}" --device cpu \
    "$@" > "$work/out.txt" 2>&1
}

fails() {  # fails PATTERN ARGS...: exit 2 with "topotrain-speculate: error: ...PATTERN"
  local pattern=$1 status=0
  shift
  speculate "$@" || status=$?
  [[ $status == 2 ]] && grep -q "^topotrain-speculate: error: .*$pattern" "$work/out.txt" ||
    { echo "topotrain-speculate $* exited $status, expected 2 and '$pattern':"; cat "$work/out.txt"; exit 1; }
}

printf '{"tokens": [76, 105, 99, 101, 110, 115, 101]}\n{"tokens": [84, 104, 101, 32]}\n\n{"tokens": [32]}\n' \
  > "$work/prompts.jsonl"
speculate --prompts "$work/prompts.jsonl" --max-new-tokens 24 --json "$work/out.json" \
  --responses "$work/responses.jsonl" ||
  { cat "$work/out.txt"; exit 1; }
grep -q "^prompts $work/prompts.jsonl: 3 prompts, 12 tokens; up to 24 new tokens each" "$work/out.txt" &&
  grep -q "^lossless: all 3 speculative responses equal plain greedy decoding token for token$" "$work/out.txt" &&
  grep -Eq "^acceptance length tau [0-9.]+ over [0-9]+ verifications" "$work/out.txt" &&
  grep -Eq "^  greedy +72 +72 +1.000 " "$work/out.txt" || { cat "$work/out.txt"; exit 1; }
python3 - "$work/out.json" "$work/out.txt" "$work/responses.jsonl" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
lines = [json.loads(line) for line in open(sys.argv[3])]
assert [line["prompt"] for line in lines] == [[76, 105, 99, 101, 110, 115, 101], [84, 104, 101, 32], [32]], lines
assert all(line["speculative"] == line["greedy"] and len(line["greedy"]) == 24 for line in lines), lines
assert sum(len(line["acceptance_lengths"]) for line in lines) == r["verifications"], (lines, r)
assert r["prompts"] == 3 and r["lossless"]["mismatched_prompts"] == 0, r
assert r["greedy"]["tokens"] == 72 and r["greedy"]["target_forwards"] == 72, r
assert sum(r["acceptance_histogram"]) == r["verifications"] == r["speculative"]["target_forwards"] - 3, r
tau = float(re.search(r"acceptance length tau ([0-9.]+)", text).group(1))
assert abs(tau - r["tau"]) < 1e-3, (tau, r["tau"])
PY

# A dataset's assistant turns: masked_dataset gives every odd position loss mask 1, so every
# document's prompts are its first 1, 3, 5, ... tokens.
"$bin/masked_dataset" "$work/small.h5" "$work/odd.h5" odd
speculate --prompts "$work/odd.h5" --num-prompts 2 --max-new-tokens 5 || { cat "$work/out.txt"; exit 1; }
grep -q "^prompts $work/odd.h5: 2 prompts, 4 tokens;" "$work/out.txt" &&
  grep -q "^lossless: all 2" "$work/out.txt" || { cat "$work/out.txt"; exit 1; }

: > "$work/empty.jsonl"
fails "prompt file '$work/empty.jsonl' holds no prompt" --prompts "$work/empty.jsonl"
printf '{"tokens": [1]}\n{"tokens": []}\n' > "$work/blank.jsonl"
fails "'$work/blank.jsonl' line 2 is an empty prompt" --prompts "$work/blank.jsonl"
fails "dataset '$work/small.h5' has no /loss_mask" --prompts "$work/small.h5"
printf '{"tokens": [1, 512]}\n' > "$work/vocab.jsonl"
fails "prompt vocab.jsonl line 1 holds token id 512 but the target '$work/target' has a vocabulary of 512" \
  --prompts "$work/vocab.jsonl"
fails "prompt file '$work/missing.jsonl' does not exist" --prompts "$work/missing.jsonl"
target="$work/drafter" fails "holds a DFlash drafter, not a target model" --prompts "$work/prompts.jsonl"
drafter="$work/target" fails "not a DFlash drafter" --prompts "$work/prompts.jsonl"
target="$work/narrow" fails "is a drafter for a target of hidden_size 64, but .* has hidden_size 32" \
  --prompts "$work/prompts.jsonl"
echo PASS
