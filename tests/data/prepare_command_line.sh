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
"$prepare" -q -j 0 -o "$work/out.h5" "$work/hello.txt" > "$work/log"
grep -qF "wrote $work/out.h5: 1 documents, 7 tokens (7 with loss mask 1)" "$work/log" || { cat "$work/log"; exit 1; }
echo PASS
