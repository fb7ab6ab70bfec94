#!/usr/bin/env python3
"""topotrain-prepare against Hugging Face's tokenizer on one corpus: ids and tokens/s.

    python3 bench/data/hf_compare.py TOKENIZER_JSON TOPOTRAIN_PREPARE [--mb 20] [--out FILE]

Writes a corpus of documents (JSONL, one "text" each) mixing the Debian license texts with
paragraphs in many scripts, emoji, decomposed (NFD) text, whitespace runs and code
(tests/hf/text_corpus.py, which the hf test tests/hf/tokenizer_corpus.py shares), then
  * tokenizes it with topotrain-prepare (all cores, and one thread), reading the ids back
    from the dataset it writes (each document ends with the eos it appends, left out here);
  * tokenizes it with the `tokenizers` package (encode_batch on all cores, and on one:
    RAYON_NUM_THREADS=1 in a child process), add_special_tokens=False;
and compares the ids document by document. Prints a Markdown table and the first
mismatches (with the code points around the first differing token).
Needs: tokenizers, h5py, numpy (a GPU machine's image has them).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unicodedata

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "hf"))
from text_corpus import first_difference, make_corpus, read_dataset, run_prepare  # noqa: E402


HF_CHILD = r"""
import json, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
texts = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
start = time.perf_counter()
encoded = tok.encode_batch(texts, add_special_tokens=False)
seconds = time.perf_counter() - start
if sys.argv[3] == "ids":
    json.dump({"seconds": seconds, "ids": [e.ids for e in encoded]}, open(sys.argv[4], "w"))
else:
    print(json.dumps({"seconds": seconds}))
"""


def run_hf(tokenizer, corpus, threads, ids_path=None):
    env = dict(os.environ)
    if threads == 1:
        env["RAYON_NUM_THREADS"] = "1"
    args = [sys.executable, "-c", HF_CHILD, tokenizer, corpus, "ids" if ids_path else "time", ids_path or "-"]
    result = subprocess.run(args, check=True, env=env, capture_output=True, text=True)
    if ids_path:
        data = json.load(open(ids_path))
        return data["seconds"], data["ids"]
    return json.loads(result.stdout)["seconds"], None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tokenizer")
    parser.add_argument("prepare")
    parser.add_argument("--mb", type=float, default=20)
    parser.add_argument("--out")
    args = parser.parse_args()
    work = tempfile.mkdtemp()
    corpus = os.path.join(work, "corpus.jsonl")
    documents, size = make_corpus(corpus, args.mb)
    cores = os.cpu_count()
    rows, ours = [], None
    for threads in (0, 1):
        out = os.path.join(work, f"ours{threads}.h5")
        seconds = run_prepare(args.prepare, args.tokenizer, corpus, out, threads)
        ids = read_dataset(out)
        ours = ours or ids
        tokens = sum(len(d) for d in ids)
        rows.append((f"topotrain-prepare, {cores if threads == 0 else 1} thread(s)", seconds, tokens))
    hf_ids = None
    for threads in (0, 1):
        seconds, ids = run_hf(args.tokenizer, corpus, threads, os.path.join(work, "hf.json") if threads == 0 else None)
        hf_ids = hf_ids or ids
        tokens = sum(len(d) for d in hf_ids)
        rows.append((f"HF tokenizers encode_batch, {cores if threads == 0 else 1} thread(s)", seconds, tokens))
    mismatched = [i for i, (a, b) in enumerate(zip(ours, hf_ids)) if a != b]
    lines = [
        f"corpus: {len(documents)} documents, {size / 1e6:.1f} MB UTF-8 ({sum(unicodedata.is_normalized('NFC', d) is False for d in documents)} not NFC)",
        "",
        "| tokenizer | seconds | tokens | Mtokens/s | MB/s |",
        "|---|---|---|---|---|",
    ]
    for name, seconds, tokens in rows:
        lines.append(f"| {name} | {seconds:.2f} | {tokens} | {tokens / seconds / 1e6:.2f} | {size / seconds / 1e6:.1f} |")
    lines.append("")
    lines.append(f"documents whose ids differ: {len(mismatched)} of {len(documents)}"
                 + ("" if len(ours) == len(hf_ids) else f" (document counts differ: {len(ours)} vs {len(hf_ids)})"))
    if mismatched:
        from tokenizers import Tokenizer
        tokenizer = Tokenizer.from_file(args.tokenizer)
        for i in mismatched[:5]:
            lines.append(f"  document {i}: " + first_difference(ours[i], hf_ids[i], documents[i], tokenizer))
    report = "\n".join(lines)
    print(report)
    if args.out:
        open(args.out, "w").write(report + "\n")
    return 0 if not mismatched else 1


if __name__ == "__main__":
    sys.exit(main())
