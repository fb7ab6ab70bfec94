#!/usr/bin/env bash
# A chat model trained by topotrain, exported, and met by transformers (ctest hf_generate_export;
# bench/models/export_check.sh runs it on a GPU with a Qwen3 tokenizer and qwen3-0.6b). The DFlash
# demo's arithmetic chats (data/chat_demo.py) are prepared with a tokenizer folder (TOKENIZER_DIR;
# by default data/make_bpe_tokenizer.py's byte-level one), a model is trained on them and
# exported with topotrain-export, and export_generate.py, on AutoTokenizer and
# AutoModelForCausalLM of the folder alone, checks:
#   - the folder's tokenizer loads as quietly as the folder it came from;
#   - generation_config.json stops generate at the tokenizer's eos (<|im_end|>);
#   - greedy generate on chat prompts (the tokenizer's, as JSON lines of ids) equals topotrain's
#     greedy continuation of the exported folder (greedy_continuation) token for token, fp32 on
#     both sides, stopping at the same token;
#   - topotrain-speculate on the exported folder and the same prompts stops at the ids generate
#     stops at, with as many greedy tokens as generate gives (a drafter trained 2 steps).
# Then, where ../shared/data/qwen3-tokenizer is beside the repository (QWEN3_TOKENIZER_DIR), a
# model with the Qwen3 tokenizer is trained one step and exported, and its tokenizer must load
# as quietly as that folder (skipped with a line where it is absent, or where TOKENIZER_DIR is set).
#
#   TOPOTRAIN_PYTHON=... TOPOTRAIN_BIN=build/bin tests/hf/export_generate.sh
#
# GENERATE_FAMILY: llama or qwen2 trains tests/hf/tiny_config.sh's model of that family instead
# of the preset (exported as LlamaForCausalLM / Qwen2ForCausalLM), and skips the Qwen3 tokenizer.
# GENERATE_DEVICE: cpu (default) or a GPU index; GENERATE_PRESET (tiny-dense), GENERATE_STEPS (100),
# GENERATE_BUDGET (tokens a step, 1024), GENERATE_LR (3e-3), GENERATE_CONVERSATIONS (600),
# GENERATE_MAX_NEW (48 tokens a response) size the run: tiny-dense's loss is 0.9 at 100 steps,
# and every response ends its turn (at 60 steps of lr 1e-3, 3.1, and none did). The work folder
# is removed at the end unless GENERATE_KEEP is a folder to leave the logs in.
set -euo pipefail
: "${TOPOTRAIN_PYTHON:?the python3 with torch and transformers}" "${TOPOTRAIN_BIN:?the bin/ folder of a build}"
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
python=$TOPOTRAIN_PYTHON bin=$TOPOTRAIN_BIN
for tool in moe_train dflash_train topotrain-export topotrain-prepare topotrain-speculate greedy_continuation; do
  [[ -x $bin/$tool ]] || { echo "export_generate: $bin/$tool not found; build target ${tool//-/_}" >&2; exit 2; }
done
source launch/env.sh
work=${GENERATE_KEEP:-$(mktemp -d)}
mkdir -p "$work"
[[ -n ${GENERATE_KEEP:-} ]] || trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --oversubscribe --bind-to none)

device=${GENERATE_DEVICE:-cpu} preset=${GENERATE_PRESET:-tiny-dense} steps=${GENERATE_STEPS:-100}
budget=${GENERATE_BUDGET:-1024} lr=${GENERATE_LR:-3e-3} conversations=${GENERATE_CONVERSATIONS:-600} max_new=${GENERATE_MAX_NEW:-48}
if [[ $device == cpu ]]; then devices='"cpu"' interconnect=cpu on=cpu; else devices="[$device]" interconnect=pcie4 on=cuda:$device; fi
printf '[topology]\nname = "one"\ninterconnect = "%s"\n[[roles]]\nrole = "trainer"\nranks = [0]\ndevices = %s\n' \
  "$interconnect" "$devices" > "$work/one.toml"
printf '[topology]\nname = "1t1d"\ninterconnect = "%s"\n[[roles]]\nrole = "target"\nranks = [0]\ndevices = %s\n[[roles]]\nrole = "drafter"\nranks = [1]\ndevices = %s\n' \
  "$interconnect" "$devices" "$devices" > "$work/1t1d.toml"

# run LOG COMMAND...: the command's output to LOG, shown with the command where it fails.
run() {
  local log=$1
  shift
  "$@" > "$log" 2>&1 || { echo "FAIL: $*" >&2; tail -30 "$log" >&2; exit 1; }
}

# train NAME TOKENIZER_DIR CHATS STEPS [--set ...]: prepares CHATS with the tokenizer, trains
# $preset on them and exports the run to $work/NAME-hf.
train() {
  local name=$1 tokenizer=$2 chats=$3 steps=$4
  shift 4
  run "$work/$name-prepare.log" "$bin/topotrain-prepare" -q "$chats" -o "$work/$name/train.h5" \
    --tokenizer "$tokenizer/tokenizer.json"
  run "$work/$name-train.log" "${mpirun[@]}" -np 1 "$bin/moe_train" "$work/one.toml" --set model.preset="$preset" \
    --set data.path="$work/$name/train.h5" --set train.token_budget="$budget" --set train.max_steps="$steps" \
    --set train.epochs=1000 --set train.lr="$lr" --set log.every=20 --set checkpoint.every_steps=0 \
    --set checkpoint.dir="$work" --set checkpoint.run="$name" "$@"
  run "$work/$name-export.log" "$bin/topotrain-export" "$work/$name" "$work/$name-hf" --dtype fp32
}

tokenizer=${TOKENIZER_DIR:-$work/byte-level}
if [[ -z ${TOKENIZER_DIR:-} ]]; then
  mkdir -p "$tokenizer" && "$python" data/make_bpe_tokenizer.py /dev/null 0 "$tokenizer/tokenizer.json"
fi
"$python" data/chat_demo.py 1 "$conversations" > "$work/chat-train.jsonl"
"$python" data/chat_demo.py 2 16 > "$work/chat-eval.jsonl"
family_model=() model_name=$preset
if [[ -n ${GENERATE_FAMILY:-} ]]; then
  bash tests/hf/tiny_config.sh "$GENERATE_FAMILY" >"$work/family-config.json"
  family_model=(--set model.config="$work/family-config.json")
  model_name="a tiny $GENERATE_FAMILY model"
fi
train chat "$tokenizer" "$work/chat-train.jsonl" "$steps" "${family_model[@]}"
echo "trained $model_name to $(grep -o 'step [0-9]* | loss [0-9.]*' "$work/chat-train.log" | tail -1), exported"
run "$work/prompts.log" "$python" tests/hf/export_generate.py prompts "$work/chat-hf" "$work/chat-eval.jsonl" 16 \
  "$work/prompts.jsonl"
run "$work/greedy.log" "$bin/greedy_continuation" "$work/chat-hf" "$work/prompts.jsonl" 16 "$max_new" \
  "$work/continuations.jsonl" "$on"
run "$work/drafter.log" "${mpirun[@]}" -np 2 "$bin/dflash_train" "$work/1t1d.toml" --set model.weights="$work/chat-hf" \
  --set data.path="$work/chat/train.h5" --set train.token_budget=256 --set train.max_steps=2 \
  --set model.draft_layers=1 --set model.taps=1 --set model.block_size=4 --set checkpoint.dir="$work" \
  --set checkpoint.run=drafter
run "$work/speculate.log" "$bin/topotrain-speculate" --target "$work/chat-hf" --drafter "$work/drafter" \
  --prompts "$work/prompts.jsonl" --num-prompts 16 --max-new-tokens "$max_new" --device "$on" --dtype fp32 \
  --json "$work/speculation.json"
status=0
"$python" tests/hf/export_generate.py check "$work/chat-hf" "$tokenizer" \
  --continuations "$work/continuations.jsonl" --max-new-tokens "$max_new" --speculation "$work/speculation.json" ||
  status=1

qwen3=${QWEN3_TOKENIZER_DIR:-$root/../shared/data/qwen3-tokenizer}
if [[ -n ${TOKENIZER_DIR:-} || -n ${GENERATE_FAMILY:-} ]]; then
  echo "SKIP the Qwen3 tokenizer export: TOKENIZER_DIR or GENERATE_FAMILY is set (that run was the one checked)"
elif [[ ! -f $qwen3/tokenizer.json ]]; then
  echo "SKIP the Qwen3 tokenizer export: no tokenizer.json in $qwen3 (QWEN3_TOKENIZER_DIR names a Qwen3 tokenizer folder)"
else
  # Its vocabulary, a few of its layers: one step on 40 chats makes a folder to load.
  printf '{"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "tie_word_embeddings": true}\n' \
    > "$work/qwen3-small.json"
  head -40 "$work/chat-train.jsonl" > "$work/qwen3-chats.jsonl"
  train qwen3 "$qwen3" "$work/qwen3-chats.jsonl" 1 --set model.config="$work/qwen3-small.json"
  echo "the Qwen3 tokenizer's export:"
  "$python" tests/hf/export_generate.py check "$work/qwen3-hf" "$qwen3" --untrained || status=1
fi
exit $status
