"""topotrain-prepare's ids against Hugging Face tokenizers', document by document: with the real
Qwen3 tokenizer, or with a Llama 3.1 or Qwen2.5 tokenizer made by family_tokenizers.py.

    tokenizer_corpus.py [TOKENIZER_DIR]   (default: ../shared/data/qwen3-tokenizer beside the repository)
    tokenizer_corpus.py --family llama3|qwen2_5

The Llama 3.1 and Qwen2.5 tokenizer files cannot be downloaded where this runs: --family builds
each with HF tokenizers' own API (models.BPE, pre_tokenizers.Split/ByteLevel,
processors.TemplateProcessing, a vocabulary trained with BpeTrainer), with the published
tokenizer.json's model and pre-tokenizer settings: for Llama 3.1 ignore_merges, no normalizer,
its Split regex (digits in runs of up to three, a case-insensitive contraction group) and the
<|begin_of_text|> post-processor; for Qwen2.5 NFC and Qwen2's regex (family_tokenizers.py).

The corpus (tests/hf/text_corpus.py): the EDGE_CASES documents (empty, whitespace-only and
very long documents; combining marks and NFD text; emoji ZWJ sequences, skin tones, flags and
tags; many scripts; digit, space and newline runs; CR/LF/tab mixes; code, URLs; special-token
text and near misses; case-folded contractions; noncharacters, private use, U+FFFD, controls)
and 1 MB of SAMPLES mixed with the Debian license texts, 15% of it decomposed (NFD).
topotrain's ids are topotrain-prepare's (TOPOTRAIN_BIN), read back from the dataset it writes
(Llama: --eos <|end_of_text|>); the reference is
tokenizers.Tokenizer.from_file(tokenizer.json).encode(text, add_special_tokens=True), which
starts every Llama document with <|begin_of_text|> (what a Llama model expects) and adds
nothing for Qwen.

Bound: exact. Every document's ids equal HF's; HF's decode of topotrain's ids (after the
post-processor's tokens) gives back the text as HF's normaliser writes it (topotrain has no
decoder of its own, so the round trip runs through HF's); topotrain-prepare ends each document
with the eos and writes none for a text of only spaces, tabs, CR and LF (or an empty one),
which HF encodes as it does any text. For Llama, ignore_merges must change HF's ids of some
documents (else the corpus would not test it). Prints the first mismatch of each kind with its
tokens and code points; exit 1 on any, 77 (skipped) without the Qwen3 tokenizer (--family
needs no file).
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_tokenizers  # noqa: E402
from text_corpus import (EDGE_CASES, first_difference, first_text_difference, make_corpus,  # noqa: E402
                         prepare_binary, read_documents, run_prepare)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77
EOS = {"llama3": "<|end_of_text|>", "qwen2_5": None}  # None: topotrain-prepare's default, <|endoftext|>


def main():
    from tokenizers import Tokenizer
    family = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--family" else None
    with tempfile.TemporaryDirectory(prefix="hf_tokenizer_corpus.") as work:
        if family:
            folder = family_tokenizers.write(family, os.path.join(work, family))
        else:
            folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "data", "qwen3-tokenizer")
        tokenizer_json = os.path.join(folder, "tokenizer.json")
        if not os.path.isfile(tokenizer_json):
            print(f"SKIP: no Qwen3 tokenizer at {os.path.abspath(tokenizer_json)} (put the Qwen3 tokenizer.json there)")
            return SKIP
        hf = Tokenizer.from_file(tokenizer_json)
        return compare(hf, tokenizer_json, prepare_binary(), work, EOS.get(family))


def without_ignore_merges(tokenizer_json):
    """The tokenizer with ignore_merges off, to show where the corpus depends on it."""
    from tokenizers import Tokenizer
    spec = json.load(open(tokenizer_json, encoding="utf-8"))
    spec["model"]["ignore_merges"] = False
    return Tokenizer.from_str(json.dumps(spec))


def compare(hf, tokenizer_json, prepare, work, eos_token):
    corpus, dataset = os.path.join(work, "corpus.jsonl"), os.path.join(work, "corpus.h5")
    names = [name for name, _ in EDGE_CASES]
    documents, size = make_corpus(corpus, 1.0, extra=[text for _, text in EDGE_CASES])
    run_prepare(prepare, tokenizer_json, corpus, dataset, threads=2, eos=eos_token)
    written, eos = read_documents(dataset)
    print(f"{len(documents)} documents ({len(EDGE_CASES)} edge cases), {size / 1e6:.1f} MB; "
          f"topotrain-prepare wrote {len(written)}")

    # topotrain-prepare skips texts of only spaces, tabs, CR and LF: the rest pair up in order.
    kept = [i for i, text in enumerate(documents) if text.strip(" \t\r\n")]
    if len(kept) != len(written):
        print(f"FAIL: {len(written)} documents written, {len(kept)} expected (one per text with something "
              "besides spaces, tabs, CR and LF)")
        return 1
    texts = [documents[i] for i in kept]
    reference = [e.ids for e in hf.encode_batch(texts, add_special_tokens=True)]
    prefix = len(hf.encode("", add_special_tokens=True).ids)  # the post-processor's tokens before the text
    print(f"post-processor tokens before each document: {hf.encode('', add_special_tokens=True).tokens}")
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
        expected = hf.normalizer.normalize_str(documents[i]) if hf.normalizer else documents[i]
        decoded = hf.decode(ours[prefix:], skip_special_tokens=False)
        if decoded != expected:
            failures["round trip"].append(f"{label}: HF's decode of ours against the normalised text: "
                                          + first_text_difference(decoded, expected))
    if json.load(open(tokenizer_json, encoding="utf-8"))["model"].get("ignore_merges"):
        merged = [e.ids for e in without_ignore_merges(tokenizer_json).encode_batch(texts, add_special_tokens=True)]
        changed = sum(a != b for a, b in zip(merged, reference))
        print(f"ignore_merges changes HF's ids of {changed} of {len(texts)} documents")
        if not changed:
            failures["ids"].append("ignore_merges changes no document's ids: the corpus does not test it")
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
