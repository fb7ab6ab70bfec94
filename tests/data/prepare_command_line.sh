#!/usr/bin/env bash
# topotrain-prepare's command line: bad arguments and input exit 2 with a message naming
# the flag, file or line and the fix, and write nothing; good input exits 0.
#   prepare_command_line.sh PREPARE_BINARY
set -euo pipefail
prepare=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'hello\n' > "$work/hello.txt"
printf '{"text": "a"}\n{"text": "b"}\n{"text": "abc\n' > "$work/unterminated.jsonl"
printf '{"messages": [{"role": "wizard", "content": "hi"}]}\n' > "$work/wizard.jsonl"
printf 'PAR1\0\0\025\034' > "$work/train.parquet"
printf '\037\213\010\0' > "$work/corpus.jsonl.gz"
printf 'a\0b\n' > "$work/nul.txt"
printf '{"text": "a"}\n{"conversations": [{"from": "bot", "value": "hi"}]}\n' > "$work/bot.jsonl"
printf '{"prompt": "a", "completion": ""}\n' > "$work/empty.jsonl"
printf '{"prompt": "a", "completion": "b"}\n{"instruction": "c", "output": "d"}\n' > "$work/sft.jsonl"

fails() {  # fails PATTERN ARGS...: prepare exits 2, prints PATTERN (a fixed string), writes no output
  local pattern=$1 status=0
  shift
  "$prepare" -q -o "$work/out.h5" "$@" > "$work/log" 2>&1 || status=$?
  if [[ $status != 2 ]] || ! grep -qF -- "$pattern" "$work/log" || [[ -e $work/out.h5 || -e $work/out.h5.tmp ]]; then
    echo "topotrain-prepare $* exited $status, expected 2 with '$pattern' and no output:"
    cat "$work/log"
    exit 1
  fi
}

fails "--threads: must be >= 0 (got -3)" -j -3 "$work/hello.txt"
fails "--gzip: Value 10 not in range 0 to 9" --gzip 10 "$work/hello.txt"
fails "topotrain-prepare: error: cannot read input 'no/such/corpus.txt'" no/such/corpus.txt
fails "--eos '<|nonexistent|>': the byte tokenizer ends documents with <|endoftext|> (id 256)" \
  --eos '<|nonexistent|>' "$work/hello.txt"
fails "$work/unterminated.jsonl:3: invalid JSON at column 14: syntax error while parsing value - invalid string: \
missing closing quote" "$work/unterminated.jsonl"
fails "nothing written to '$work/out.h5': it would have no token with loss_mask 1" "$work/wizard.jsonl"
fails "input '$work/train.parquet' is a Parquet file, not text or JSONL; convert it to JSONL first, e.g. python3 -c \
\"import pandas as pd; pd.read_parquet('$work/train.parquet').to_json('$work/train.jsonl'" "$work/train.parquet"
fails "input '$work/corpus.jsonl.gz' is gzip-compressed, not text or JSONL; decompress it first, e.g. gunzip -k" \
  "$work/hello.txt" "$work/corpus.jsonl.gz"
fails "$work/nul.txt:1: a NUL byte" "$work/nul.txt"
fails "$work/bot.jsonl:2: conversations[0]: \"from\" is \"bot\", which is not a ShareGPT role" "$work/bot.jsonl"
fails "$work/empty.jsonl:1: \"completion\" is empty" "$work/empty.jsonl"
# The output's folder is made; one that cannot be is bad input with the reason.
"$prepare" -q -o "$work/new/folder/sft.h5" "$work/sft.jsonl" > "$work/log"
grep -qF "wrote $work/new/folder/sft.h5: 2 documents" "$work/log" || { cat "$work/log"; exit 1; }
grep -qF "2 conversations rendered" "$work/log" || { cat "$work/log"; exit 1; }
status=0
"$prepare" -q -o "$work/hello.txt/sub/x.h5" "$work/hello.txt" > "$work/log" 2>&1 || status=$?
[[ $status == 2 ]] && grep -qF "cannot write '$work/hello.txt/sub/x.h5': cannot create directory" "$work/log" ||
  { echo "exit $status"; cat "$work/log"; exit 1; }
"$prepare" -q -j 0 -o "$work/out.h5" "$work/hello.txt" > "$work/log"
grep -qF "wrote $work/out.h5: 1 documents, 7 tokens (7 with loss mask 1)" "$work/log" || { cat "$work/log"; exit 1; }
echo PASS
