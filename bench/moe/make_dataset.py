#!/usr/bin/env python3
"""Writes a synthetic token dataset in topotrain's HDF5 format (include/topotrain/data/token_dataset.h):

    /tokens   uint32 [N]         documents back to back
    /offsets  uint64 [docs + 1]  document d is tokens[offsets[d], offsets[d+1])
    attributes vocab_size, eos_id (int), tokenizer (str)

Documents end with eos; their lengths are uniform in [mean_len / 2, 3 * mean_len / 2]. Their
tokens are uniform random ids, or with --text the tokens of a dataset that topotrain-prepare
wrote from real text, read in order (and again from the start when they run out) and cut to
those lengths, so that attention and packing cost the same either way.

Token values decide an MoE's routing, and routing its experts' GEMM time. At the HF Qwen3Moe
reference shape the router sends almost every token to the same 8 of 16 experts from the first
steps, on random tokens and on real text (Python sources and license texts tokenized with
Qwen3's tokenizer) alike, and both run at the same speed (bench/moe/RESULTS.md, "2026-12-04,
later"); --text is there to check that for other shapes and data.

    python3 bench/moe/make_dataset.py OUT.h5 [--tokens 8000000] [--mean-len 2048]
                                            [--vocab 151936] [--eos 151643] [--seed 0]
                                            [--text PREPARED.h5]
"""
import argparse
import sys

import numpy as np

try:
    import h5py
except ImportError:
    sys.exit("make_dataset.py: h5py is missing (pip install h5py)")


def document_lengths(rng, total_tokens, mean_len):
    low, high = max(2, mean_len // 2), max(3, 3 * mean_len // 2)
    lengths = []
    remaining = total_tokens
    while remaining > 0:
        n = int(rng.integers(low, high + 1))
        lengths.append(max(2, min(n, remaining)))
        remaining -= lengths[-1]
    return np.asarray(lengths, dtype=np.uint64)


def text_tokens(path, count, vocab):
    try:
        with h5py.File(path, "r") as f:
            if "tokens" not in f:
                sys.exit(f"make_dataset.py: --text {path} has no /tokens (write it with topotrain-prepare)")
            text = f["tokens"][:]
    except OSError as e:
        sys.exit(f"make_dataset.py: --text {path}: {e}")
    if text.size == 0:
        sys.exit(f"make_dataset.py: --text {path} holds no tokens")
    if int(text.max()) >= vocab:
        sys.exit(f"make_dataset.py: --text {path} holds token id {int(text.max())} >= --vocab {vocab}")
    return np.resize(text.astype(np.uint32), count)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--tokens", type=int, default=8_000_000, help="total tokens (about)")
    parser.add_argument("--mean-len", type=int, default=2048, help="mean document length")
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--eos", type=int, default=None, help="eos id (default: Qwen's 151643, or vocab - 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--text", help="take the token values from this topotrain-prepare dataset")
    args = parser.parse_args()
    eos = args.eos if args.eos is not None else (151643 if args.vocab > 151643 else args.vocab - 1)
    if not 0 <= eos < args.vocab:
        sys.exit(f"make_dataset.py: --eos {eos} must lie in [0, --vocab {args.vocab})")
    if args.tokens < 2 or args.mean_len < 2:
        sys.exit("make_dataset.py: --tokens and --mean-len must be at least 2")

    rng = np.random.default_rng(args.seed)
    lengths = document_lengths(rng, args.tokens, args.mean_len)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint64)
    if args.text:
        tokens = text_tokens(args.text, int(offsets[-1]), args.vocab)
    else:
        tokens = rng.integers(0, args.vocab, size=int(offsets[-1]), dtype=np.uint32)
    tokens[offsets[1:].astype(np.int64) - 1] = eos
    with h5py.File(args.out, "w") as f:
        f.create_dataset("tokens", data=tokens, chunks=(min(1 << 16, tokens.size),))
        f.create_dataset("offsets", data=offsets)
        f.attrs["vocab_size"] = np.int64(args.vocab)
        f.attrs["eos_id"] = np.int64(eos)
        f.attrs["tokenizer"] = f"text of {args.text}" if args.text else "synthetic-random"
    print(f"{args.out}: {lengths.size} documents, {tokens.size} tokens, mean length {tokens.size / lengths.size:.0f}, "
          f"vocab {args.vocab}")


if __name__ == "__main__":
    main()
