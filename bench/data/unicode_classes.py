#!/usr/bin/env python3
"""Which code points topotrain-prepare pre-tokenizes differently from Hugging Face's tokenizer.

    /usr/bin/python3 bench/data/unicode_classes.py TOKENIZER_JSON TOPOTRAIN_PREPARE NODE_MODULES \\
        [--fixture tests/data/qwen3_unicode_probes.json] [--table src/data/unicode_classes_since_utf8proc.inc]

NODE_MODULES holds the `tokenizers` npm package (`npm install tokenizers` in a scratch
directory), the Node binding of HF's Rust tokenizer. For every Unicode scalar value
(U+0000..U+10FFFF without the surrogates) this prints
  * the classes \\p{L}, \\p{N} and \\s as HF's regex engine gives them (asked directly: a
    Split pre-tokenizer that removes the class), as PCRE2 does (libpcre2-8 asked directly, UTF +
    UCP, as src/data/unicode_regex.cpp compiles) and as utf8proc's general categories do
    (L*, N*, and White_Space = Z* + U+0009..U+000D + U+0085): the ranges where they disagree;
  * the code points whose ids differ between topotrain-prepare and HF's tokenizer on the probes
    "a{c}a", "1{c}{c}1", " {c}x" and "x{c}{c}x", which put c next to a letter, a digit, a space
    and itself, so that the pre-tokenizer's classes decide where the pieces end (one JSONL
    document each; ids read back from topotrain-prepare's dataset).
--fixture writes the ranges where HF's and PCRE2's classes differ, and HF's ids for the probes
of each range's first and last code point: the reference of tests/data/unicode_classes_test.cpp
and of the real-tokenizer test in tests/data/tokenizer_test.cpp. --table writes the classes HF
gives code points that utf8proc leaves unassigned (src/data/unicode_classes_since_utf8proc.inc).
Exit status 1 when some ids differ. Needs: node, h5py, numpy (Debian: nodejs, python3-h5py).
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "hf"))
from text_corpus import read_dataset, run_prepare  # noqa: E402

PROBES = ["a{c}a", "1{c}{c}1", " {c}x", "x{c}{c}x"]
CLASSES = {"L": r"\p{L}", "N": r"\p{N}", "s": r"\s"}

NODE_CHILD = r"""
const fs = require('fs');
const tk = require('tokenizers');
const [mode, tokenizerPath, input, output] = process.argv.slice(2);
function classMatcher(regex) {
  // A tokenizer whose only step removes what `regex` matches: a lone character is in the
  // class when nothing is left of it.
  return tk.Tokenizer.fromString(JSON.stringify({
    version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: {type: 'Split', pattern: {Regex: regex}, behavior: 'Removed', invert: false},
    post_processor: null, decoder: null,
    model: {type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
            end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab: {}, merges: []}})).getPreTokenizer();
}
(async () => {
  const lines = fs.readFileSync(input, 'utf8').split('\n').filter((l) => l.length > 0);
  const out = fs.openSync(output, 'w');
  if (mode === 'ids') {
    const t = tk.Tokenizer.fromFile(tokenizerPath);
    const texts = lines.map((l) => JSON.parse(l).text);
    for (let i = 0; i < texts.length; i += 50000) {
      const encoded = await t.encodeBatch(texts.slice(i, i + 50000), {addSpecialTokens: false});
      fs.writeSync(out, encoded.map((e) => JSON.stringify(e.getIds())).join('\n') + '\n');
    }
  } else {
    const {classes, code_points} = JSON.parse(lines[0]);
    const matchers = Object.fromEntries(Object.entries(classes).map(([name, re]) => [name, classMatcher(re)]));
    const result = code_points.map((c) => Object.keys(matchers).filter(
        (name) => matchers[name].preTokenizeString(String.fromCodePoint(c)).length === 0));
    fs.writeSync(out, JSON.stringify(result));
  }
  fs.closeSync(out);
})();
"""


def scalar_values():
    return [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def run_node(node_modules, mode, tokenizer, input_path, output_path):
    script = os.path.join(os.path.dirname(input_path), "hf_child.js")
    with open(script, "w") as f:
        f.write(NODE_CHILD)
    env = dict(os.environ, NODE_PATH=os.path.abspath(node_modules))
    subprocess.run(["node", script, mode, tokenizer, input_path, output_path], check=True, env=env)


def hf_classes(node_modules, code_points, work):
    query, answer = os.path.join(work, "classes.json"), os.path.join(work, "classes.out.json")
    with open(query, "w") as f:
        json.dump({"classes": CLASSES, "code_points": code_points}, f)
    run_node(node_modules, "classes", "-", query, answer)
    return ["".join(sorted(c)) or "-" for c in json.load(open(answer))]


class Pcre2:
    """libpcre2-8 itself, with the options src/data/unicode_regex.cpp compiles with."""
    UTF, UCP, ANCHORED = 0x00080000, 0x00020000, 0x80000000

    def __init__(self):
        self.lib = ctypes.CDLL("libpcre2-8.so.0")
        self.lib.pcre2_compile_8.restype = ctypes.c_void_p
        self.lib.pcre2_compile_8.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                                             ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t),
                                             ctypes.c_void_p]
        self.lib.pcre2_match_data_create_from_pattern_8.restype = ctypes.c_void_p
        self.lib.pcre2_match_data_create_from_pattern_8.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.lib.pcre2_match_8.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                           ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p]

    def classes(self, code_points):
        compiled = {}
        for name, regex in CLASSES.items():
            pattern = (regex + r"\z").encode()
            error, offset = ctypes.c_int(), ctypes.c_size_t()
            code = self.lib.pcre2_compile_8(pattern, len(pattern), self.UTF | self.UCP, ctypes.byref(error),
                                            ctypes.byref(offset), None)
            compiled[name] = (code, self.lib.pcre2_match_data_create_from_pattern_8(code, None))
        result = []
        for c in code_points:
            subject = chr(c).encode("utf-8")
            names = [name for name, (code, data) in compiled.items()
                     if self.lib.pcre2_match_8(code, subject, len(subject), 0, self.ANCHORED, data, None) >= 0]
            result.append("".join(sorted(names)) or "-")
        return result


def utf8proc_classes(code_points):
    """The rule src/data/unicode_classes.cpp follows: L = general category L*, N = N*,
    s = White_Space (the Z* categories, U+0009..U+000D and U+0085), from utf8proc's tables."""
    lib = ctypes.CDLL("libutf8proc.so.2")
    lib.utf8proc_category_string.restype = ctypes.c_char_p
    result = []
    for c in code_points:
        category = lib.utf8proc_category_string(c).decode()
        names = [name for name in ("L", "N") if category[0] == name]
        if category[0] == "Z" or 0x09 <= c <= 0x0D or c == 0x85:
            names.append("s")
        result.append("".join(sorted(names)) or "-")
    return result


def utf8proc_version():
    lib = ctypes.CDLL("libutf8proc.so.2")
    lib.utf8proc_unicode_version.restype = ctypes.c_char_p
    return lib.utf8proc_unicode_version().decode()


def write_table(path, rows):
    """The classes HF gives code points that utf8proc's Unicode version leaves unassigned
    (characters assigned since), the rows src/data/unicode_classes.cpp adds to utf8proc's."""
    lib = ctypes.CDLL("libutf8proc.so.2")
    lib.utf8proc_category_string.restype = ctypes.c_char_p
    unassigned = [(c, h) for c, h in rows if lib.utf8proc_category_string(c).decode() == "Cn"]
    others = [f"U+{c:04X}" for c, h in rows if lib.utf8proc_category_string(c).decode() != "Cn"]
    if others or any(len(h) != 1 for _, h in unassigned):
        sys.exit(f"HF's classes differ from utf8proc's on assigned code points or in several classes at once: "
                 f"{' '.join(others[:20])}; the table cannot express that")
    with open(path, "w") as f:
        f.write(f"// Generated by bench/data/unicode_classes.py --table; do not edit. Code points that utf8proc\n"
                f"// (Unicode {utf8proc_version()}) leaves unassigned and HF's tokenizer puts in a class (characters\n"
                f"// of later Unicode versions): {{first, last, class}}, 'L' = \\p{{L}}, 'N' = \\p{{N}}, 's' = \\s.\n")
        for first, last, h in ranges_of(unassigned):
            f.write(f"{{0x{first:04X}, 0x{last:04X}, '{h}'}},\n")
    print(f"wrote {len(unassigned)} code points to {path}")


def write_fixture(path, differences, probes):
    """One difference [first, last, HF class, PCRE2 class] or probe {text, ids} a line."""
    with open(path, "w") as f:
        f.write('{"generated_by": "bench/data/unicode_classes.py",\n"differences": [\n')
        f.write(",\n".join(json.dumps(d) for d in differences))
        f.write('],\n"probes": [\n')
        f.write(",\n".join(json.dumps(p) for p in probes))
        f.write("]}\n")


def ranges_of(rows):
    """Rows (code point, value) as [first, last, value] for each run of consecutive code points
    with the same value."""
    out = []
    for c, classes in rows:
        if out and out[-1][1] == c - 1 and out[-1][2] == classes:
            out[-1][1] = c
        else:
            out.append([c, c, classes])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tokenizer")
    parser.add_argument("prepare")
    parser.add_argument("node_modules")
    parser.add_argument("--fixture")
    parser.add_argument("--table")
    args = parser.parse_args()
    work = tempfile.mkdtemp()
    code_points = scalar_values()

    # The classes themselves: HF's regex, PCRE2 and utf8proc's categories, for every code point.
    hf, pcre2, rule = hf_classes(args.node_modules, code_points, work), Pcre2().classes(code_points), \
        utf8proc_classes(code_points)
    table = ranges_of([(c, (h, p, r)) for c, h, p, r in zip(code_points, hf, pcre2, rule) if h != p or h != r])
    print(f"{len(code_points)} code points; classes (L = \\p{{L}}, N = \\p{{N}}, s = \\s, - = none) where HF's, "
          f"PCRE2's and utf8proc's (Unicode {utf8proc_version()}) disagree:")
    print("\n| code points | count | HF | PCRE2 | utf8proc |\n|---|---|---|---|---|")
    for first, last, (h, p, r) in table:
        span = f"U+{first:04X}" if first == last else f"U+{first:04X}..U+{last:04X}"
        print(f"| {span} | {last - first + 1} | {h} | {p} | {r} |")
    print(f"\ncode points where HF and PCRE2 disagree: {sum(h != p for h, p in zip(hf, pcre2))}; "
          f"HF and utf8proc: {sum(h != r for h, r in zip(hf, rule))}")

    if args.table:
        write_table(args.table, [(c, h) for c, h, r in zip(code_points, hf, rule) if h != r])

    # The tokenizers on the probes.
    corpus = os.path.join(work, "probes.jsonl")
    texts = [p.replace("{c}", chr(c)) for c in code_points for p in PROBES]
    with open(corpus, "w", encoding="utf-8") as out:
        for text in texts:
            out.write(json.dumps({"text": text}) + "\n")
    run_prepare(args.prepare, args.tokenizer, corpus, os.path.join(work, "ours.h5"), 0)
    ours = read_dataset(os.path.join(work, "ours.h5"))
    hf_path = os.path.join(work, "hf.jsonl")
    run_node(args.node_modules, "ids", args.tokenizer, corpus, hf_path)
    with open(hf_path) as f:
        hf_ids = [json.loads(line) for line in f]
    assert len(ours) == len(hf_ids) == len(texts), (len(ours), len(hf_ids), len(texts))
    differing = sorted({code_points[i // len(PROBES)] for i in range(len(texts)) if ours[i] != hf_ids[i]})
    print(f"\n{len(PROBES)} probes per code point ({', '.join(PROBES)}); code points whose ids differ between "
          f"topotrain-prepare and HF: {len(differing)}")
    for first, last, _ in ranges_of([(c, None) for c in differing]):
        print(f"  U+{first:04X}" + ("" if first == last else f"..U+{last:04X}"))

    if args.fixture:
        # HF's ids for the code points where PCRE2's classes are not HF's: what the correction must get right.
        differences = ranges_of([(c, (h, p)) for c, h, p in zip(code_points, hf, pcre2) if h != p])
        chosen = sorted({c for first, last, _ in differences for c in (first, last)})
        index = {c: i for i, c in enumerate(code_points)}
        probes = [{"text": texts[index[c] * len(PROBES) + k], "ids": hf_ids[index[c] * len(PROBES) + k]}
                  for c in chosen for k in range(len(PROBES))]
        write_fixture(args.fixture, [[first, last, h, p] for first, last, (h, p) in differences], probes)
        print(f"wrote {len(probes)} probes of {len(chosen)} code points to {args.fixture}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
