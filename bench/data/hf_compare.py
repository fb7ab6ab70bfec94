#!/usr/bin/env python3
"""topotrain-prepare against Hugging Face's tokenizer on one corpus: ids and tokens/s.

    python3 bench/data/hf_compare.py TOKENIZER_JSON TOPOTRAIN_PREPARE [--mb 20] [--out FILE]

Writes a corpus of documents (JSONL, one "text" each) mixing the Debian license texts with
paragraphs in many scripts, emoji, decomposed (NFD) text, whitespace runs and code, then
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
import random
import subprocess
import sys
import tempfile
import time
import unicodedata

SAMPLES = [
    "The quick brown fox jumps over the lazy dog. 1234567890 +-*/ = 3.14159",
    "敏捷的棕色狐狸跳过了懒狗。机器学习模型需要大量的数据来训练，分布式训练可以加速这个过程。",
    "素早い茶色の狐が怠け者の犬を飛び越える。東京都は日本の首都です。カタカナとひらがな。",
    "다람쥐 헌 쳇바퀴에 타고파. 한국어 문장은 자모로 분해될 수 있습니다.",
    "نص عربي للاختبار: الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "हिन्दी में एक वाक्य: तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Ελληνικά με τόνους: άέήίόύώ ϊϋΐΰ",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "עברית: דג סקרן שט בים מאוכזב ולפתע מצא חברה",
    "Emoji: 👩‍👩‍👧‍👦 🇩🇪🇯🇵 👍🏽 ❤️‍🔥 🧑🏿‍🚀 — and ‘curly’ “quotes” … ellipsis",
    "Tiếng Việt có dấu: Tôi yêu tiếng nước tôi từ khi mới ra đời.",
    "Crème brûlée, naïve café, Ångström, Zürich, São Paulo, Łódź, Øresund",
    "def f(x):\n    return {\"a\": [1, 2, 3], 'b': x ** 2}  # comment\n\n\tif x:\n\t\tpass\n",
    "int main() { std::vector<int> v{1,2,3}; for (auto& x : v) x <<= 2; return 0; }",
    "Whitespace   runs \t\t tabs\n\n\nnewlines    and trailing spaces   \n  ",
    "Numbers: 1,000,000.00 ¥5000 €12.50 ½ ¾ ² ³ ① ⅷ 0x1F 1e-9",
    "Mixed: English中文日本語한국어العربيةहिन्दी",
    "ﬁ ﬂ ligatures, ｆｕｌｌｗｉｄｔｈ letters, ㈱ ㍻ compatibility forms",
]


def make_corpus(path, megabytes, seed=7):
    rng = random.Random(seed)
    licenses = []
    for name in ("Apache-2.0", "GPL-3", "LGPL-2.1", "MPL-2.0", "GFDL-1.3"):
        p = os.path.join("/usr/share/common-licenses", name)
        if os.path.exists(p):
            licenses += [t for t in open(p, encoding="utf-8").read().split("\n\n") if t.strip()]
    pool = SAMPLES + licenses
    documents, size = [], 0
    while size < megabytes * 1e6:
        parts = [rng.choice(pool) for _ in range(rng.randint(1, 6))]
        text = rng.choice(["\n\n", "\n", " ", ""]).join(parts)
        if rng.random() < 0.15:
            text = unicodedata.normalize("NFD", text)  # decomposed: the NFC normalizer must act
        documents.append(text)
        size += len(text.encode("utf-8"))
    with open(path, "w", encoding="utf-8") as out:
        for text in documents:
            out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return documents, size


def run_prepare(binary, tokenizer, corpus, output, threads):
    start = time.perf_counter()
    subprocess.run([binary, "--quiet", "--threads", str(threads), "--tokenizer", tokenizer, "--output", output, corpus],
                   check=True)
    return time.perf_counter() - start


def read_dataset(path):
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        tokens = np.asarray(f["tokens"][:], dtype=np.int64)
        offsets = np.asarray(f["offsets"][:], dtype=np.int64)
    # each document ends with the eos topotrain-prepare appends
    return [tokens[offsets[i]:offsets[i + 1] - 1].tolist() for i in range(len(offsets) - 1)]


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
    for i in mismatched[:5]:
        a, b = ours[i], hf_ids[i]
        k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
        text = documents[i]
        lines.append(f"  document {i}: first difference at token {k}: ours {a[k:k + 4]} HF {b[k:k + 4]}; "
                     f"text starts {text[:60]!r}; non-ASCII code points: "
                     + " ".join(sorted({f'U+{ord(c):04X}' for c in text if ord(c) > 127})[:12]))
    report = "\n".join(lines)
    print(report)
    if args.out:
        open(args.out, "w").write(report + "\n")
    return 0 if not mismatched else 1


if __name__ == "__main__":
    sys.exit(main())
