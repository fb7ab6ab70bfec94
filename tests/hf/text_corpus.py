"""Text in many scripts for comparing topotrain-prepare's ids with Hugging Face's tokenizer,
and the two ends of that comparison on topotrain's side: running topotrain-prepare on a
JSONL corpus and reading the dataset it writes.

Used by the ctests tests/hf/tokenizer_corpus.py and chat_template.py, and by bench/data/hf_compare.py and
bench/data/unicode_classes.py (speed and per-code-point benchmarks):
  * SAMPLES: paragraphs in many scripts, emoji, code, whitespace runs, compatibility forms;
  * EDGE_CASES: named documents that each probe one rule of normalisation, pre-tokenisation,
    added-token matching or merging (empty, whitespace-only and very long ones included);
  * make_corpus: SAMPLES mixed with the Debian license texts, some decomposed (NFD);
  * prepare_binary / run_prepare / read_documents / read_dataset: topotrain's ids, read back
    with h5py;
  * first_difference, first_text_difference: where two id lists or texts part, with code points.
Standard library only at import time (h5py and numpy are imported when a dataset is read).
"""
import json
import os
import random
import subprocess
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


def _long_mixed(chars):
    """A document of about `chars` characters cycling through SAMPLES, joined by single spaces."""
    parts, size, i = [], 0, 0
    while size < chars:
        parts.append(SAMPLES[i % len(SAMPLES)])
        size += len(parts[-1]) + 1
        i += 1
    return " ".join(parts)


# (name, text): each probes one rule; the name says which (printed with a mismatch).
EDGE_CASES = [
    ("empty", ""),
    ("one space", " "),
    ("newlines only", "\n\n\n"),
    ("CR LF only", "\r\n\r\n"),
    ("tabs and spaces only", "\t \t  \t"),
    ("vertical tab and form feed only", "\x0b\x0c\x0b"),
    ("Unicode spaces only", "\u3000\u00a0\u2009\u202f\u205f"),
    ("line and paragraph separators", "one\u2028two\u2029three\u0085four"),
    ("CR/LF/tab mixes", "a\r\nb\rc\n\rd\t\r\n\te\r\r\n\n\r f  \r\n  \r\n\r\ng\t\n\t\n"),
    ("trailing whitespace runs", "end with spaces     \nand tabs\t\t\t\nand both \t \t "),
    ("leading whitespace runs", "     \t\n\n  indented text\n    more"),
    ("digit runs", "1234567890" * 5 + " 007 0.000001 1_000_000 2026-12-07T16:05:56Z"),
    ("non-ASCII digits", "٠١٢٣٤٥٦٧٨٩ ۰۱۲ ०१२३४ ๐๑๒ ０１２３ 𝟘𝟙𝟚 ① ⅷ ↉ ¹²³"),
    ("combining: e + acute vs é", "cafe\u0301 café Cafe\u0301s CAFE\u0301"),
    ("combining: Angstrom sign and A ring", "\u212b \u0041\u030a \u00c5 \u212bngstr\u00f6m"),
    ("combining: canonical reordering", "q\u0307\u0323 q\u0323\u0307 \u1e9b\u0323 a\u0328\u0301\u0302"),
    ("combining: stacked marks without composite", "x\u0301\u0302\u0303\u0304 Z͑ͫ̓ͪ̂ͫ̽͏̴̙̤̞͉͚̯̞̠͍A̴̵̜̰͔ͫ͗͢L̠ͨͧͩ͘G̴̻͈͍͔̹̑͗̎̅͛́Ǫ̵̹̻̝̳͂̌̌͘"),
    ("NFD Korean jamo", unicodedata.normalize("NFD", "다람쥐 헌 쳇바퀴에 타고파")),
    ("NFD Vietnamese", unicodedata.normalize("NFD", "Tiếng Việt có dấu: Tôi yêu tiếng nước tôi")),
    ("NFD Latin accents", unicodedata.normalize("NFD", "Crème brûlée, naïve café, Ångström, Zürich, Łódź")),
    ("NFD Japanese dakuten", unicodedata.normalize("NFD", "ガギグゲゴ ぱぴぷぺぽ がっこう")),
    ("Hebrew with niqqud", "שָׁלוֹם עֲלֵיכֶם בְּרֵאשִׁית"),
    ("Arabic with tashkeel and numbers", "العَرَبِيَّة ١٢٣ abc 456 ـــ ﷺ ﻻ"),
    ("Devanagari conjuncts", "क्षत्रिय ज्ञान श्री द्व्यर्थक क़ ख़ ग़"),
    ("Thai without spaces", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ๑๒๓"),
    ("Japanese kana", "ひらがな カタカナ ｶﾀｶﾅ ヴァイオリン ゟ ヿ 〜ー"),
    ("CJK with ideographic punctuation", "「引用」『書名』（括弧）【重要】，。、；：！？"),
    ("other scripts", "ქართული Հայերեն አማርኛ தமிழ் বাংলা ខ្មែរ မြန်မာ བོད་ཡིག ᏣᎳᎩ ᠮᠣᠩᠭᠣᠯ\u180eᠪᠢᠴᠢᠭ"),
    ("newer Unicode letters and numbers", "\U00031350\U00031351 \U0002ebf0 \U0001d2c0\U0001d2c1 a\U0001d2c0a"),
    ("emoji ZWJ sequences", "👩‍👩‍👧‍👦 👨‍💻 🏳️‍🌈 🧑‍🤝‍🧑 ❤️‍🔥 🐻‍❄️"),
    ("emoji skin tones", "👍🏻👍🏼👍🏽👍🏾👍🏿 🧑🏿‍🚀 👋🏽 hi"),
    ("emoji flags, keycaps, tags", "🇩🇪🇯🇵🇺🇸 1️⃣ #️⃣ 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"),
    ("emoji runs", "🙂" * 40 + " 😀😃😄😁 text🙂text"),
    ("special-token text", "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>after"),
    ("special-token near misses", "<|im_start| < |im_end|> <|IM_END|> <im_end> <|im_end|><|im_end|> <<|im_end|>>"),
    ("think and tool tags in text", "<think>\nx\n</think>\n\n<tool_call>{}</tool_call> <tool_response>"),
    ("contractions", "I'M YOU'RE it's They'LL don't we'd I'VE o'clock rock'n'roll it’s "
                     "THAT'SALL I'DLIKE WE'VEGOT YOU'REIN it'sgood"),
    ("contractions under case folding", "it'ſ IT'S we'Ll they'rE x'ſx a'ß b'K c'ǅ d＇S e'İ"),  # ſ folds to s
    ("Llama special-token text", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                                 "<|python_tag|>x<|eom_id|><|end_of_text|> <|begin_of_text| <|eot_id|<|eot_id|>>"),
    ("URLs", "https://example.com/a/b?q=1&r=%E2%9C%93#frag http://[2001:db8::1]:8080/ "
             "mailto:x@y.org ftp://h/p~q file:///tmp/a%20b"),
    ("paths and identifiers", "/usr/lib/x86_64-linux-gnu/libc.so.6 C:\\Users\\a\\b.txt __init__ snake_case camelCase"),
    ("code: Python", "class A:\n    def f(self, x: int) -> int:\n        return x ** 2  # square\n\n\n"
                     "print(f'{A().f(3):>8}')\n"),
    ("code: C++ with tabs", "#include <map>\nint main() {\n\tstd::map<int, int> m;\n"
                            "\tfor (;;) {\n\t\tbreak;\n\t}\n}\n"),
    ("code: JSON and shell", "{\"k\": [1, 2.5e-3, null, true], \"s\": \"\\u00e9\"}\n"
                             "$ ls -la | grep -E '^d' && echo $?\n"),
    ("punctuation runs", "!!!??? ... --- === *** ~~~ ### @@@ ((( ))) [[[ ]]] {{{ }}} <<< >>> ,,, ;;;"),
    ("noncharacters", "a\ufdd0b \ufdef \ufffe \uffff \U0001fffe \U0010ffff z"),
    ("private use", "\ue000\ue001 \uf8ff \U000f0000 \U00100000 x\ue000x"),
    ("replacement character", "\ufffd bad\ufffdbytes \ufffd\ufffd"),
    ("format characters", "\ufeffBOM at start, zero\u200bwidth, non\u200cjoiner, \u200djoiner, "
                          "\u200eLRM\u200f RLM \u202eoverride\u202c soft\u00adhyphen"),
    ("C0 and C1 controls", "\x00a\x00\x01b\x07c\x1b[0m\x7f d\x80\x85\x9f e"),
    ("math alphanumerics and letterlike", "𝐀𝐁𝐂 𝒜𝓑 𝔄 𝕏 ℝ ℕ ℃ № ™ Ω K"),
    ("fullwidth and compatibility", "ＡＢＣ１２３！ ㈱ ㍻ ﬁ ﬀ ½ ² ℡ ﹏"),
    ("mixed script adjacency", "abc中文123한글ひらがなабв١٢٣αβγ😀x"),
    ("long: mixed scripts", _long_mixed(200_000)),
    ("long: one letter run", "a" * 20_000),
    ("long: space run then word", " " * 20_000 + "x"),
    ("long: newline run", "\n" * 10_000 + "x"),
    ("long: digit run", "1" * 10_000),
    ("long: one CJK character", "的" * 10_000),
    ("long: word without spaces", "".join(random.Random(3).choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5_000))),
]


def make_corpus(path, megabytes, seed=7, extra=()):
    """Writes `path` (JSONL, one {"text": ...} per line): `extra` documents first, then SAMPLES and
    the Debian license texts mixed at random, 15% of the mixtures decomposed (NFD), until the
    mixtures hold `megabytes` MB of UTF-8. Returns (documents, total UTF-8 bytes)."""
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
    documents = list(extra) + documents
    with open(path, "w", encoding="utf-8") as out:
        for text in documents:
            out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return documents, sum(len(d.encode("utf-8")) for d in documents)


def prepare_binary():
    """topotrain-prepare in TOPOTRAIN_BIN (the build's bin/, as ctest sets it), else in build/bin."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    folder = os.environ.get("TOPOTRAIN_BIN", os.path.join(root, "build", "bin"))
    binary = os.path.join(folder, "topotrain-prepare")
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"no topotrain-prepare in {folder}: build it (cmake --build BUILD --target "
                         "topotrain_prepare) and set TOPOTRAIN_BIN to BUILD/bin")
    return binary


def run_prepare(binary, tokenizer, corpus, output, threads, eos=None):
    """Runs topotrain-prepare on `corpus` (documents ended with `eos`, None: its default);
    returns its wall seconds."""
    start = time.perf_counter()
    subprocess.run([binary, "--quiet", "--threads", str(threads), "--tokenizer", tokenizer, "--output", output, corpus]
                   + (["--eos", eos] if eos else []), check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def read_documents(path):
    """A topotrain dataset's documents as (ids, loss_mask) lists, and its eos id."""
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        tokens = np.asarray(f["tokens"][:], dtype=np.int64)
        offsets = np.asarray(f["offsets"][:], dtype=np.int64)
        mask = np.asarray(f["loss_mask"][:], dtype=np.int64) if "loss_mask" in f else np.ones_like(tokens)
        eos = int(f.attrs["eos_id"])
    spans = zip(offsets[:-1], offsets[1:])
    return [(tokens[a:b].tolist(), mask[a:b].tolist()) for a, b in spans], eos


def read_dataset(path):
    """The ids of a dataset of text documents, without the eos topotrain-prepare ends each with."""
    documents, _ = read_documents(path)
    return [ids[:-1] for ids, _ in documents]


def first_difference(ours, theirs, text, tokenizer):
    """None when the id lists are equal, else one line: the first differing token of each side,
    and the code points of `text` (as the tokenizer normalises it) around where they part.
    `tokenizer` is a tokenizers.Tokenizer (to spell ids and decode the common prefix)."""
    if ours == theirs:
        return None
    k = next((j for j in range(min(len(ours), len(theirs))) if ours[j] != theirs[j]), min(len(ours), len(theirs)))
    normalized = tokenizer.normalizer.normalize_str(text) if tokenizer.normalizer else text
    prefix = tokenizer.decode(ours[:k], skip_special_tokens=False)
    at = next((i for i, (a, b) in enumerate(zip(prefix, normalized)) if a != b), min(len(prefix), len(normalized)))
    window = normalized[max(0, at - 8):at + 8]
    spell = lambda ids: [f"{i}:{tokenizer.id_to_token(i)!r}" for i in ids]  # noqa: E731
    return (f"first difference at token {k} of {len(ours)} (ours) / {len(theirs)} (HF): ours {spell(ours[k:k + 4])}, "
            f"HF {spell(theirs[k:k + 4])}; text around character {at}: {window!r} = "
            + " ".join(f"U+{ord(c):04X}" for c in window)
            + ("" if normalized == text else " (normalised: the text itself is not in this form)"))


def first_text_difference(ours, theirs):
    """Where two strings part: the text around it and the code points from there."""
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    window = lambda s: s[max(0, at - 12):at + 12]  # noqa: E731
    return (f"text parts at character {at}: ours {window(ours)!r}, HF {window(theirs)!r}; code points from there: "
            f"ours {' '.join(f'U+{ord(c):04X}' for c in ours[at:at + 6])}, "
            f"HF {' '.join(f'U+{ord(c):04X}' for c in theirs[at:at + 6])}")
