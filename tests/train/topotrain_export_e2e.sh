#!/usr/bin/env bash
# End-to-end checks of topotrain-export and of model.weights naming a run directory, on one
# CPU rank (tests/train/CMakeLists.txt runs each):
#   topotrain_export_e2e.sh BIN_DIR run      a 2-step tiny-moe moe_train run exported (fp32 in
#                                            shards, and bf16) loads back into moe_train
#                                            (model.weights = the export) equal / within bf16
#                                            rounding; bad input exits 2 with a message
#   topotrain_export_e2e.sh BIN_DIR weights  model.weights = a tiny-dense run directory with
#                                            model.preset left at tiny-moe builds tiny-dense and
#                                            loads its weights; a preset set to another model is
#                                            refused, naming both, with exit 2 on every rank
#   topotrain_export_e2e.sh BIN_DIR new_user the README's path with a Hugging Face tokenizer:
#                                            chat JSONL prepared into a folder that does not exist
#                                            yet, trained, exported with its tokenizer and
#                                            generation_config.json, fine-tuned from the export
#                                            with no model.config (the export's config.json gives
#                                            the shape; a topology's preset of another model is
#                                            refused until --set model.preset= takes it back),
#                                            and exported again with the same tokenizer files
#   topotrain_export_e2e.sh BIN_DIR drafter  the CPU demo's 1t1d dflash_train run for 3 steps exported
#                                            as a DFlash drafter folder (fp32, in shards), which the
#                                            export's printout describes; model.draft_weights = that
#                                            folder starts a drafter whose export is byte for byte the
#                                            first; model.weights = that folder is refused with exit 2
# A run that loads weights trains one step at lr 0, so its checkpoint holds them unchanged.
set -euo pipefail
bin=$1 scenario=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --oversubscribe --allow-run-as-root --bind-to none)
printf '[topology]\nname = "one"\ninterconnect = "cpu"\n[[roles]]\nrole = "trainer"\nranks = [0]\ndevices = "cpu"\n' \
  > "$work/one.toml"

train() {  # train RUN_NAME [args...]: moe_train on one rank, output in $work/RUN_NAME.log
  local run=$1
  shift
  timeout 300 "${mpirun[@]}" -np 1 "$bin/moe_train" "$work/one.toml" --set train.token_budget=256 \
    --set checkpoint.dir="$work" --set checkpoint.run="$run" "$@" >"$work/$run.log" 2>&1
}

load_step() {  # load_step RUN_NAME [args...]: one step at lr 0 from model.weights
  local run=$1
  shift
  train "$run" --set train.lr=0 --set train.max_steps=1 "$@" || { cat "$work/$run.log"; exit 1; }
}

export_fails() {  # export_fails PATTERN ARGS...: topotrain-export exits 2 with a message matching PATTERN
  local pattern=$1 status=0
  shift
  "$bin/topotrain-export" "$@" >"$work/export.log" 2>&1 || status=$?
  [[ $status == 2 ]] && grep -q "^topotrain-export: error: .*$pattern" "$work/export.log" ||
    { echo "topotrain-export $* exited $status, expected 2 and '$pattern':"; cat "$work/export.log"; exit 1; }
}

usage_fails() {  # usage_fails TEXT ARGS...: topotrain-export refuses its command line: exit 2, printing TEXT
  local text=$1 status=0
  shift
  "$bin/topotrain-export" "$@" >"$work/export.log" 2>&1 || status=$?
  [[ $status == 2 ]] && grep -qF -- "$text" "$work/export.log" ||
    { echo "topotrain-export $* exited $status, expected 2 and '$text':"; cat "$work/export.log"; exit 1; }
}

case $scenario in
run)
  train moe --set model.preset=tiny-moe --set train.max_steps=2 || { cat "$work/moe.log"; exit 1; }
  "$bin/topotrain-export" "$work/moe" "$work/hf32" --dtype fp32 --max-shard-gb 0.0001 > "$work/export32.log"
  grep -q "^exported $work/moe/step-00000002.h5 (step 2, model preset 'tiny-moe', Qwen3MoeForCausalLM) as fp32" \
    "$work/export32.log" && grep -Eq "^[0-9]+ files, [0-9.]+ GiB in [0-9.]+ s$" "$work/export32.log" &&
    grep -q "model.safetensors.index.json" "$work/export32.log" || { cat "$work/export32.log"; exit 1; }
  "$bin/topotrain-export" "$work/moe/step-00000002.h5" "$work/hf16" > "$work/export16.log"
  grep -q ") as bf16:" "$work/export16.log" || { cat "$work/export16.log"; exit 1; }
  load_step back32 --set model.weights="$work/hf32" --set model.config="$work/hf32/config.json"
  "$bin/checkpoint_diff" "$work/moe/step-00000002.h5" "$work/back32/step-00000001.h5" 0 model/
  load_step back16 --set model.weights="$work/hf16" --set model.config="$work/hf16/config.json"
  # Weights of tiny-moe after two steps are below 2 in magnitude: bf16 rounds them by < 2^-8 * 2.
  "$bin/checkpoint_diff" "$work/moe/step-00000002.h5" "$work/back16/step-00000001.h5" 0.008 model/
  if "$bin/checkpoint_diff" "$work/moe/step-00000002.h5" "$work/back16/step-00000001.h5" 0 model/ >/dev/null 2>&1; then
    echo "the bf16 export equals the fp32 weights: it was not rounded"; exit 1
  fi

  export_fails "$work/missing does not exist" "$work/missing" "$work/out"
  export_fails "is not empty" "$work/moe" "$work/hf32"
  "$bin/topotrain-export" "$work/moe" "$work/hf32" --force > /dev/null
  mkdir "$work/not-a-run"
  export_fails "neither a topotrain checkpoint" "$work/not-a-run" "$work/out"
  usage_fails "--dtype: fp16 not in {bf16,fp32}" "$work/moe" "$work/out" --dtype fp16
  usage_fails "--max-shard-gb: must be > 0 (got 0)" "$work/moe" "$work/out" --max-shard-gb 0
  ;;
weights)
  train dense --set model.preset=tiny-dense --set train.max_steps=2 || { cat "$work/dense.log"; exit 1; }
  load_step from-run --set model.weights="$work/dense"
  grep -q "model preset 'tiny-dense': Qwen3 dense" "$work/from-run.log" || { cat "$work/from-run.log"; exit 1; }
  "$bin/checkpoint_diff" "$work/dense/step-00000002.h5" "$work/from-run/step-00000001.h5" 0 model/
  if train wrong --set model.preset=tiny-moe --set model.weights="$work/dense"; then
    echo "a tiny-dense checkpoint was loaded into tiny-moe"; exit 1
  fi
  grep -q "^moe_train: error: model.preset = \"tiny-moe\" (--set) is not the model model.weights = \"$work/dense\" (--set) holds, model preset 'tiny-dense': model_type \"qwen3_moe\" vs \"qwen3\", tie_word_embeddings false vs true (preset vs weights)" \
    "$work/wrong.log" || { cat "$work/wrong.log"; exit 1; }
  grep -q "MPI_ABORT" "$work/wrong.log" && { cat "$work/wrong.log"; exit 1; }
  ;;
drafter)
  dflash() {  # dflash RUN [args...]: the CPU demo's 1t1d (a tiny-dense target, a one-layer drafter)
    local run=$1
    shift
    timeout 300 "${mpirun[@]}" -np 2 "$bin/dflash_train" topology/cpu-1t1d.toml --set train.token_budget=256 \
      --set checkpoint.dir="$work" --set checkpoint.run="$run" "$@" >"$work/$run.log" 2>&1
  }
  dflash trained --set train.max_steps=3 || { cat "$work/trained.log"; exit 1; }
  "$bin/topotrain-export" "$work/trained" "$work/hf" --dtype fp32 --max-shard-gb 0.00005 > "$work/export.log"
  grep -q "^exported $work/trained/step-00000003.h5 (step 3, DFlashDraftModel: 1 layers, block 4, for a target of 3 layers trained as model preset 'tiny-dense') as fp32:" \
    "$work/export.log" && grep -q "model.safetensors.index.json" "$work/export.log" &&
    grep -q "^mask token: id 511 (dflash_config.mask_token_id)" "$work/export.log" &&
    grep -q "^target_layer_ids: \[1\] (model.taps): the drafter reads the outputs of the target's decoder layers 1 (0-based; HF's hidden_states\[2\])" \
      "$work/export.log" || { cat "$work/export.log"; exit 1; }
  grep -q '"architectures": \[\s*"DFlashDraftModel"' <(tr -d '\n' < "$work/hf/config.json") || { cat "$work/hf/config.json"; exit 1; }
  # Back in, one step at lr 0, and out again: the same bytes.
  dflash back --set train.max_steps=1 --set train.lr=0 --set model.draft_weights="$work/hf" ||
    { cat "$work/back.log"; exit 1; }
  grep -q "starting from the drafter $work/hf" "$work/back.log" || { cat "$work/back.log"; exit 1; }
  "$bin/topotrain-export" "$work/back" "$work/hf-again" --dtype fp32 --max-shard-gb 0.00005 > /dev/null
  for file in "$work"/hf/*; do cmp "$file" "$work/hf-again/$(basename "$file")"; done
  [[ $(ls "$work/hf" | wc -l) == $(ls "$work/hf-again" | wc -l) ]]
  # The folder is no target.
  if dflash wrong --set train.max_steps=1 --set model.weights="$work/hf"; then
    echo "a drafter folder was accepted as the target's weights"; exit 1
  fi
  grep -q "^dflash_train: model.weights: $work/hf (a DFlash folder) holds a DFlash drafter, not a target model: .*model.draft_weights" \
    "$work/wrong.log" || { cat "$work/wrong.log"; exit 1; }
  grep -q "MPI_ABORT" "$work/wrong.log" && { cat "$work/wrong.log"; exit 1; }
  ;;
new_user)
  mkdir "$work/tokenizer"
  python3 data/make_bpe_tokenizer.py /dev/null 0 "$work/tokenizer/tokenizer.json"
  python3 data/chat_demo.py 7 300 > "$work/chat.jsonl"
  "$bin/topotrain-prepare" -o "$work/data/chat.h5" --tokenizer "$work/tokenizer/tokenizer.json" "$work/chat.jsonl" \
    > "$work/prepare.log" 2>&1 || { cat "$work/prepare.log"; exit 1; }
  train base --set model.preset=tiny-dense --set data.path="$work/data/chat.h5" --set train.max_steps=3 ||
    { cat "$work/base.log"; exit 1; }
  "$bin/topotrain-export" "$work/base" "$work/hf" > "$work/export.log"
  grep -q "note:" "$work/export.log" && { cat "$work/export.log"; exit 1; }
  for file in tokenizer.json tokenizer_config.json; do cmp "$work/tokenizer/$file" "$work/hf/$file"; done
  # generate stops at the tokenizer's eos, <|im_end|> (258); its pad is <|endoftext|> (256).
  python3 - "$work/hf/generation_config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
assert config["eos_token_id"] == 258 and config["pad_token_id"] == 256, config
PY
  # Fine-tuning the export names nothing but the folder: its config.json gives the shape.
  train tuned --set model.weights="$work/hf" --set data.path="$work/data/chat.h5" --set train.max_steps=2 ||
    { cat "$work/tuned.log"; exit 1; }
  grep -q "weights loaded from $work/hf" "$work/tuned.log" || { cat "$work/tuned.log"; exit 1; }
  # A topology that sets another preset is refused, naming both, and --set model.preset= takes it back.
  sed 's/^interconnect = "cpu"$/&\n[model]\npreset = "tiny-moe"/' "$work/one.toml" > "$work/moe.toml"
  status=0
  timeout 300 "${mpirun[@]}" -np 1 "$bin/moe_train" "$work/moe.toml" --set model.weights="$work/hf" \
    --set data.path="$work/data/chat.h5" --set checkpoint.dir="$work" --set checkpoint.run=refused \
    > "$work/refused.log" 2>&1 || status=$?
  [[ $status == 2 ]] && grep -q "model.preset = \"tiny-moe\" ($work/moe.toml:[0-9]*:[0-9]*) is not the model .*$work/hf/config.json" \
    "$work/refused.log" || { echo "exit $status"; cat "$work/refused.log"; exit 1; }
  timeout 300 "${mpirun[@]}" -np 1 "$bin/moe_train" "$work/moe.toml" --set model.weights="$work/hf" --set model.preset= \
    --set data.path="$work/data/chat.h5" --set checkpoint.dir="$work" --set checkpoint.run=taken-back \
    --set train.max_steps=1 --set train.token_budget=256 > "$work/taken-back.log" 2>&1 ||
    { cat "$work/taken-back.log"; exit 1; }
  "$bin/topotrain-export" "$work/tuned" "$work/hf-tuned" > /dev/null
  for file in tokenizer.json tokenizer_config.json generation_config.json; do cmp "$work/hf/$file" "$work/hf-tuned/$file"; done
  ;;
*) echo "unknown scenario $scenario"; exit 2 ;;
esac
echo "PASS $scenario"
