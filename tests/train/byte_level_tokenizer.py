"""Writes a Hugging Face tokenizer folder small enough for the tiny presets: a byte-level BPE
of the 256 bytes (GPT-2's byte-to-character map, no merges) and the ChatML special tokens
<|endoftext|> 256, <|im_start|> 257, <|im_end|> 258, with tokenizer_config.json naming
<|im_end|> the eos token and <|endoftext|> the pad token, as a chat model's does.

    python3 byte_level_tokenizer.py DIR
"""
import json
import os
import sys


def byte_characters():
    """GPT-2's map of each byte to a printable character (tokenizers' ByteLevel alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def main(folder):
    os.makedirs(folder, exist_ok=True)
    vocab = {c: b for b, c in byte_characters().items()}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokenizer = {
        "version": "1.0",
        "added_tokens": [{"id": 256 + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(specials)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "bos_token": None, "additional_special_tokens": specials[1:]}
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1])
