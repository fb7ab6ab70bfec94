#!/usr/bin/env python3
"""The DFlash target's forward in transformers, for #49's goal that topotrain's target forward
runs >= 1.2x transformers' at the same shape: Qwen3Model (the backbone and its final norm, what
topotrain's target computes; no LM head) of the qwen3-8b or qwen3-0.6b preset's shape, or the
base model of an HF config.json's family (--config: bench/dflash/llama-3.1-8b.json), random
bf16 weights on one GPU, torch.no_grad, output_hidden_states=True (the taps come from there).
Documents of synthetic lengths, uniform in [mean/2, 3*mean/2] as bench/moe/make_dataset.py
draws them, fill batches of --tokens tokens, the last document cut to fit; transformers has no
packed-batch forward of its own, so each document runs as a batch of one with SDPA's causal
kernel, no padding. Prints tokens/s over the measured batches (CUDA events; --warmup batches
first) as one JSON line.

    python3 bench/dflash/target_forward_reference.py [--preset qwen3-8b | --config FILE] [--tokens 16384]
                                                     [--mean-len 4096] [--batches 8] [--warmup 2]

Set it beside the target rank's forward rate in the same sitting (bench/dflash/pipeline.sh's
`target stream` lines and topotrain-report's target forward phase, same shape and documents).
"""
import argparse
import json
import random

PRESETS = {  # src/model/config.cpp's presets
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
}


def document_lengths(rng, tokens, mean_len):
    lengths, left = [], tokens
    while left > 0:
        length = min(left, rng.randint(max(2, mean_len // 2), max(3, 3 * mean_len // 2)))
        lengths.append(length)
        left -= length
    return lengths


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="qwen3-8b")
    parser.add_argument("--config", help="an HF config.json to build instead of the preset")
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--mean-len", type=int, default=4096)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()

    import torch
    from transformers import AutoConfig, AutoModel, Qwen3Config

    if args.config:
        with open(args.config) as f:
            fields = json.load(f)
        config = AutoConfig.for_model(fields.pop("model_type"), attn_implementation="sdpa", **fields)
    else:
        config = Qwen3Config(vocab_size=151936, attn_implementation="sdpa", **PRESETS[args.preset])
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # made in bf16 on the GPU: no fp32 copy of 8B weights first
    with torch.device("cuda"):
        model = AutoModel.from_config(config).eval()
    rng = random.Random(0)
    batches = [[torch.randint(0, config.vocab_size, (1, n), device="cuda") for n in
                document_lengths(rng, args.tokens, args.mean_len)] for _ in range(args.warmup + args.batches)]

    def forward(batch):
        for ids in batch:
            model(input_ids=ids, output_hidden_states=True, use_cache=False)

    with torch.no_grad():
        for batch in batches[:args.warmup]:
            forward(batch)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for batch in batches[args.warmup:]:
            forward(batch)
        end.record()
        torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    tokens = sum(ids.numel() for batch in batches[args.warmup:] for ids in batch)
    print(json.dumps({"impl": "transformers", "model": args.config or args.preset, "attention": "sdpa per document",
                      "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
                      "ms_per_batch": seconds * 1e3 / args.batches, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
