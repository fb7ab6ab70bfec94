#!/usr/bin/env python3
"""Learns a small byte-level BPE from a text file and writes it as a HF tokenizer.json
(Qwen2 pre-tokenizer layout; the 256 bytes, the merges, then <|endoftext|>, <|im_start|> and
<|im_end|>) with a tokenizer_config.json beside it that names <|im_end|> the eos token and
<|endoftext|> the pad token, as a chat model's does: a Hugging Face tokenizer folder for
machines without network access (bench/data/run.sh benchmarks topotrain-prepare's BPE path
with one; with 0 merges and an empty corpus it is the byte-level tokenizer of 259 ids that
the e2e tests prepare chat data with, small enough for the tiny presets).
Usage: make_bpe_tokenizer.py corpus.txt merges out.json"""
import collections
import json
import os
import re
import sys

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_alphabet():
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = 0
    table = {}
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def main(corpus_path, num_merges, out_path):
    alphabet = byte_alphabet()
    text = open(corpus_path, encoding="utf-8", errors="replace").read()
    # Training only needs roughly word-like pieces; Python's re has no \p{L}.
    words = collections.Counter(re.findall(r" ?\w+| ?[^\s\w]+|\s+", text))
    corpus = {tuple(alphabet[b] for b in w.encode("utf-8")): n for w, n in words.items()}
    vocab = {alphabet[b]: b for b in range(256)}
    merges = []
    for _ in range(num_merges):
        pairs = collections.Counter()
        for symbols, n in corpus.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += n
        if not pairs:
            break
        (a, b), _ = pairs.most_common(1)[0]
        merges.append(f"{a} {b}")
        vocab.setdefault(a + b, len(vocab))
        merged = {}
        for symbols, n in corpus.items():
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        corpus = merged
    # Every field of an added token: tokenizers (the Rust library under AutoTokenizer) refuses
    # an entry that lacks one.
    added = [{"id": len(vocab) + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, c in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])]
    json.dump({
        "version": "1.0",
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "model": {"type": "BPE", "ignore_merges": False, "vocab": vocab, "merges": merges},
    }, open(out_path, "w", encoding="utf-8"), ensure_ascii=False)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "bos_token": None, "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}
    with open(os.path.join(os.path.dirname(os.path.abspath(out_path)), "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
