#!/usr/bin/env python3
"""Writes the config.json of the HF Qwen3Moe shape the MoE benchmarks compare against (hidden
1024, 12 layers, 16 heads of 64, 4 KV heads, 16 experts top-8 of 512, vocab 151936, tied) into
OUT_DIR, with transformers, for moe_train's model.config.

    python3 bench/moe/reference_shape.py OUT_DIR
"""
import sys

from transformers import Qwen3MoeConfig

if len(sys.argv) != 2:
    sys.exit(__doc__)
Qwen3MoeConfig(hidden_size=1024, num_hidden_layers=12, num_attention_heads=16, head_dim=64, num_key_value_heads=4,
               num_experts=16, num_experts_per_tok=8, moe_intermediate_size=512, vocab_size=151936,
               tie_word_embeddings=True).save_pretrained(sys.argv[1])
