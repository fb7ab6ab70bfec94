#!/usr/bin/env python3
"""How transformers' Qwen3MoeForCausalLM routes at initialisation: builds the model from a
config.json (bench/moe/reference_shape.py writes the reference shape's) with HF's own
initialisation, runs one forward of two random 4096-token rows and prints, per layer, the
busiest expert's selections over the mean per expert (moe_train's `load` is the largest of
these: 1.00 for an even split, experts / top_k when every token goes to the same experts). This
is the reference pipeline's (bench/moe/reference_train.py) starting point; bench/moe/RESULTS.md
sets it beside moe_train's `load`.

    python3 bench/moe/router_load_at_init.py CONFIG_DIR [--seed S]   (on a GPU machine)
"""
import argparse

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from reference_train import expert_loads  # this script's folder is on the path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config_dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = AutoConfig.from_pretrained(args.config_dir)
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_config(config).cuda().to(torch.bfloat16)
    tokens = torch.randint(0, config.vocab_size, (2, 4096), device="cuda")
    with torch.no_grad():
        out = model(input_ids=tokens, output_router_logits=True)
    loads = expert_loads(torch, out.router_logits, config.num_experts_per_tok, config.num_experts)
    for layer, load in enumerate(loads):
        print(f"MoE layer {layer:2}: busiest expert / mean {load:4.2f}")
    print(f"largest (moe_train's `load`): {max(loads):.2f}")


if __name__ == "__main__":
    main()
