"""topotrain-prepare's ids against Hugging Face tokenizers', document by document, with the
real Qwen3 tokenizer (NFC normaliser, Qwen's Split regex, byte-level BPE, added tokens).

    tokenizer_corpus.py [TOKENIZER_DIR]     (default: ../shared/data/qwen3-tokenizer beside the repository)

The corpus (tests/hf/text_corpus.py): the EDGE_CASES documents (empty, whitespace-only and
very long documents; combining marks and NFD text; emoji ZWJ sequences, skin tones, flags and
tags; many scripts; digit, space and newline runs; CR/LF/tab mixes; code, URLs; special-token
text and near misses; noncharacters, private use, U+FFFD, controls) and 1 MB of SAMPLES mixed
with the Debian license texts, 15% of it decomposed (NFD). topotrain's ids are
topotrain-prepare's (TOPOTRAIN_BIN), read back from the dataset it writes; the reference is
tokenizers.Tokenizer.from_file(tokenizer.json).encode(text, add_special_tokens=False).

Bound: exact. Every document's ids equal HF's; HF's decode of topotrain's ids gives back the
text as HF's normaliser writes it (topotrain has no decoder of its own, so the round trip runs
through HF's); topotrain-prepare ends each document with the eos and writes none for a text of
only spaces, tabs, CR and LF (or an empty one), which HF encodes as it does any text. Prints
the first mismatch of each kind with its tokens and code points; exit 1 on any, 77 (skipped)
without the tokenizer.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from text_corpus import (EDGE_CASES, first_difference, first_text_difference, make_corpus,  # noqa: E402
                         prepare_binary, read_documents, run_prepare)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "data", "qwen3-tokenizer")
    tokenizer_json = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(tokenizer_json):
        print(f"SKIP: no Qwen3 tokenizer at {os.path.abspath(tokenizer_json)} (put the Qwen3 tokenizer.json there)")
        return SKIP
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(tokenizer_json)
    prepare = prepare_binary()

    with tempfile.TemporaryDirectory(prefix="hf_tokenizer_corpus.") as work:
        return compare(hf, tokenizer_json, prepare, work)


def compare(hf, tokenizer_json, prepare, work):
    corpus, dataset = os.path.join(work, "corpus.jsonl"), os.path.join(work, "corpus.h5")
    names = [name for name, _ in EDGE_CASES]
    documents, size = make_corpus(corpus, 1.0, extra=[text for _, text in EDGE_CASES])
    run_prepare(prepare, tokenizer_json, corpus, dataset, threads=2)
    written, eos = read_documents(dataset)
    print(f"{len(documents)} documents ({len(EDGE_CASES)} edge cases), {size / 1e6:.1f} MB; "
          f"topotrain-prepare wrote {len(written)}")

    # topotrain-prepare skips texts of only spaces, tabs, CR and LF: the rest pair up in order.
    kept = [i for i, text in enumerate(documents) if text.strip(" \t\r\n")]
    if len(kept) != len(written):
        print(f"FAIL: {len(written)} documents written, {len(kept)} expected (one per text with something "
              "besides spaces, tabs, CR and LF)")
        return 1
    reference = [e.ids for e in hf.encode_batch([documents[i] for i in kept], add_special_tokens=False)]
    failures = {"ids": [], "eos": [], "round trip": []}
    for (ids, _), i, theirs in zip(written, kept, reference):
        label = f"document {i}" + (f" ({names[i]})" if i < len(names) else "")
        if not ids or ids[-1] != eos:
            failures["eos"].append(f"{label}: does not end with the eos {eos}: {ids[-3:]}")
            continue
        ours = ids[:-1]
        difference = first_difference(ours, theirs, documents[i], hf)
        if difference:
            failures["ids"].append(f"{label}: {difference}")
        expected = hf.normalizer.normalize_str(documents[i])
        decoded = hf.decode(ours, skip_special_tokens=False)
        if decoded != expected:
            failures["round trip"].append(f"{label}: HF's decode of ours against the normalised text: "
                                          + first_text_difference(decoded, expected))
    for kind, found in failures.items():
        if found:
            print(f"FAIL: {kind}: {len(found)} of {len(written)} documents; first: {found[0]}")
    ok = not any(failures.values())
    tokens = sum(len(ids) - 1 for ids, _ in written)
    print(("OK" if ok else "FAIL") + f": {tokens} tokens; ids equal HF's in "
          f"{len(written) - len(failures['ids']) - len(failures['eos'])} of {len(written)} documents")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
