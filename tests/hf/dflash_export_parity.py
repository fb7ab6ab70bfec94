#!/usr/bin/env python3
"""Checks an exported DFlash drafter folder against topotrain's own drafter, independently.

    dflash_export_parity.py TARGET_HF DRAFTER_HF IN.json FP32.safetensors [--bf16 BF16.safetensors]
                            [--device cuda|cpu]

The hf tests hf_dflash_export_logits and hf_dflash_FAMILY run it on CPU in fp32 (tests/hf/dflash_export_logits.sh),
bench/dflash/speculate.sh on a GPU in fp32 and bf16; tests/hf/dflash_speculate.py decodes with
the same two models (load_models, target_forward, Drafter).

TARGET_HF is topotrain-export's folder of the target (Qwen3, Llama or Qwen2), DRAFTER_HF its folder of
the drafter, IN.json {"tokens": [...], "anchors": [...]}, and FP32/BF16.safetensors what
bench/dflash/drafter_logits wrote for them in that compute dtype: `taps` [T, taps * H] and
`logits` [anchors, B, V].

Here the target runs in transformers (AutoModelForCausalLM, eager attention) and the draft
forward is written again from the DFlash format's description, on transformers' Qwen3 modules
(Qwen3RMSNorm, Qwen3MLP, Qwen3RotaryEmbedding: the drafter config's RoPE, a Llama target's llama3
scaling included; apply_rotary_pos_emb) loaded with the drafter
folder's tensors by name (strict: a tensor missing, extra or of another shape fails):

    taps     = concat of hidden_states[i + 1] for i in dflash_config.target_layer_ids
    context  = hidden_norm(fc(taps))                           rows < anchor, at their positions
    block    = embed_tokens([token[anchor], mask x (B - 1)])   at positions anchor .. anchor + B - 1
    per layer: h = input_layernorm(block); q from h (q_norm, rope); k, v from [context ; h]
               (k_norm on both, rope at their positions); attention over all of them, no mask,
               keys and values shared by groups of query heads; block += o_proj(attention);
               block += mlp(post_attention_layernorm(block))
    logits   = lm_head(norm(block))                            the drafter's norm, the target's lm_head

Each of taps and logits is compared with topotrain's in fp32 and, with --bf16, in bf16. A row
gives max |a - b|, max |a - b| / max |b| and, for logits, how often the argmax of slots 1..B-1
(the drafts) agree. Bounds on max |a - b| / max |b|:
  fp32  1e-4: both sides compute in fp32; what remains is summation order.
  bf16  2e-2, the bound bench/models/hf_parity holds topotrain's bf16 Qwen3 logits to against
        transformers', or 3 x the reference's own bf16 error (its bf16 result against its fp32
        one) where that is larger: each side rounds on its own, so two correct ones differ by
        up to about twice what either is off by. A wrong layout (a tensor transposed, a tap off
        by one layer, a norm left out) puts the results off by O(1), far outside either.
Argmax agreement is printed, not bounded: logits of random or barely trained weights have near
ties that rounding flips. Exit status 0 within bounds, 1 out of bounds, 2 bad input.
"""
import argparse
import glob
import json
import os
import sys

try:
    import torch
    from safetensors.torch import load_file
    from torch import nn
    from transformers import AutoModelForCausalLM, Qwen3Config
    from transformers.utils import logging as transformers_logging
    from transformers.models.qwen3.modeling_qwen3 import (
        Qwen3MLP,
        Qwen3RMSNorm,
        Qwen3RotaryEmbedding,
        apply_rotary_pos_emb,
    )
except ImportError as e:
    sys.exit(f"dflash_export_parity.py: {e} (needs torch, safetensors and transformers)")


transformers_logging.disable_progress_bar()  # "Loading weights" bars would bury the results


def fail(message):
    print(f"dflash_export_parity.py: error: {message}", file=sys.stderr)
    sys.exit(2)


class DraftAttention(nn.Module):
    """q from the block, k and v from [context ; block]; names as the exported layers.N.self_attn.*."""

    def __init__(self, config):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                                    config.head_dim)
        hidden, bias = config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(self, block, context, block_rope, key_rope):
        b, c = block.shape[0], context.shape[0]
        q = self.q_norm(self.q_proj(block).view(b, self.heads, self.head_dim)).transpose(0, 1)[None]
        both = torch.cat([context, block], 0)
        k = self.k_norm(self.k_proj(both).view(b + c, self.kv_heads, self.head_dim)).transpose(0, 1)[None]
        v = self.v_proj(both).view(b + c, self.kv_heads, self.head_dim).transpose(0, 1)[None]
        q, _ = apply_rotary_pos_emb(q, q, *block_rope)
        k, _ = apply_rotary_pos_emb(k, k, *key_rope)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-1, -2)) * self.head_dim ** -0.5
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = (weights @ v)[0].transpose(0, 1).reshape(b, self.heads * self.head_dim)
        return self.o_proj(out)


class DraftLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = DraftAttention(config)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = Qwen3MLP(config)

    def forward(self, block, context, block_rope, key_rope):
        block = block + self.self_attn(self.input_layernorm(block), context, block_rope, key_rope)
        return block + self.mlp(self.post_attention_layernorm(block))


class Drafter(nn.Module):
    """The exported folder's tensors: fc, hidden_norm, layers.N.*, norm; and its dflash_config."""

    def __init__(self, config, layer_ids, mask_id, block_size):
        super().__init__()
        self.layer_ids, self.mask_id, self.block_size = layer_ids, mask_id, block_size
        self.fc = nn.Linear(len(layer_ids) * config.hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList(DraftLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary = Qwen3RotaryEmbedding(config)

    def rope(self, like, positions):
        return self.rotary(like, positions[None])

    def forward(self, taps, tokens, anchors, embed, lm_head):
        """Logits [anchors, B, V] of a block at each anchor."""
        context = self.hidden_norm(self.fc(taps))
        device, block_size = taps.device, self.block_size
        out = []
        for anchor in anchors:
            ids = torch.tensor([tokens[anchor]] + [self.mask_id] * (block_size - 1), device=device)
            block = embed[ids]
            block_positions = torch.arange(anchor, anchor + block_size, device=device)
            block_rope = self.rope(block, block_positions)
            key_rope = self.rope(block, torch.arange(0, anchor + block_size, device=device))
            for layer in self.layers:
                block = layer(block, context[:anchor], block_rope, key_rope)
            out.append(self.norm(block) @ lm_head.t())
        return torch.stack(out).float()


def drafter_tensors(folder):
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if not files:
        fail(f"{folder} holds no .safetensors file: pass topotrain-export's drafter folder")
    tensors = {}
    for path in files:
        tensors.update(load_file(path))
    return tensors


def load_models(target_dir, drafter_dir, dtype, device):
    """transformers' target (eager attention) and the reimplemented drafter, in `dtype`, in eval mode."""
    for path in (target_dir, drafter_dir):
        if not os.path.isfile(os.path.join(path, "config.json")):
            fail(f"{path} has no config.json: pass topotrain-export's folders of the target and the drafter")
    with open(os.path.join(drafter_dir, "config.json")) as f:
        raw = json.load(f)
    dflash = raw.get("dflash_config", {})
    if "target_layer_ids" not in dflash or "mask_token_id" not in dflash or "block_size" not in raw:
        fail(f"{drafter_dir}/config.json lacks dflash_config.target_layer_ids, dflash_config.mask_token_id or "
             "block_size: is it a DFlash drafter folder?")
    config = Qwen3Config.from_pretrained(drafter_dir)

    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=dtype, attn_implementation="eager").to(device)
    target.eval()
    if max(dflash["target_layer_ids"]) >= target.config.num_hidden_layers - 1:
        fail(f"target_layer_ids {dflash['target_layer_ids']} name the target's last layer "
             f"({target.config.num_hidden_layers - 1}) or one past it: transformers' hidden_states of the last layer "
             "is after the final norm")
    drafter = Drafter(config, dflash["target_layer_ids"], dflash["mask_token_id"], raw["block_size"])
    try:
        drafter.load_state_dict(drafter_tensors(drafter_dir), strict=True)
    except RuntimeError as e:  # a tensor missing, extra or of another shape: the export's layout is wrong
        print(f"dflash_export_parity.py: {drafter_dir} does not hold the DFlash layout: {e}\nFAIL", file=sys.stderr)
        sys.exit(1)
    drafter.to(device=device, dtype=dtype).eval()
    # Frequencies stay fp32, as in transformers' own bf16 models: rounded to bf16 they would put
    # the rotary angles at positions in the hundreds off by a large part of a radian.
    drafter.rotary.float()
    return target, drafter


def target_forward(target, drafter, tokens):
    """The target's logits [T, V] over `tokens` (one sequence from position 0) and the drafter's taps [T, taps * H]."""
    ids = torch.tensor([tokens], device=target.device)
    out = target(input_ids=ids, output_hidden_states=True)
    taps = torch.cat([out.hidden_states[i + 1][0] for i in drafter.layer_ids], -1)
    return out.logits[0], taps


def reference(target_dir, drafter_dir, tokens, anchors, dtype, device):
    """transformers' taps and the reimplemented drafter's logits, in `dtype`."""
    target, drafter = load_models(target_dir, drafter_dir, dtype, device)
    with torch.no_grad():
        _, taps = target_forward(target, drafter, tokens)
        embed = target.get_input_embeddings().weight
        lm_head = target.get_output_embeddings().weight
        logits = drafter(taps, tokens, anchors, embed, lm_head)
    return {"taps": taps.float().cpu(), "logits": logits.cpu()}, drafter.layer_ids


def difference(a, b):
    a, b = a.double(), b.double()
    worst = (a - b).abs().max().item()
    return worst, worst / max(b.abs().max().item(), 1e-30)


def agreement(a, b):
    """Share of the draft slots (1..B-1) whose argmax agree."""
    return (a[:, 1:].argmax(-1) == b[:, 1:].argmax(-1)).double().mean().item()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target")
    parser.add_argument("drafter")
    parser.add_argument("inputs")
    parser.add_argument("fp32")
    parser.add_argument("--bf16")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    with open(args.inputs) as f:
        inputs = json.load(f)
    tokens, anchors = inputs["tokens"], inputs["anchors"]

    ref32, layer_ids = reference(args.target, args.drafter, tokens, anchors, torch.float32, args.device)
    print(f"{len(tokens)} tokens, {len(anchors)} anchors, target_layer_ids {layer_ids} (hidden_states "
          f"{[i + 1 for i in layer_ids]}), transformers on {args.device}")
    print(f"{'check':<14} {'max |a-b|':>10} {'rel':>10} {'bound':>9} {'argmax':>8}  verdict")
    ok = True

    def row(name, ours, ref, bound):
        nonlocal ok
        worst, rel = difference(ours, ref)
        agree = f"{agreement(ours, ref):8.4f}" if ours.dim() == 3 else f"{'-':>8}"
        good = rel <= bound
        ok &= good
        print(f"{name:<14} {worst:10.3e} {rel:10.3e} {bound:9.2e} {agree}  {'OK' if good else 'FAIL'}")

    ours32 = load_file(args.fp32)
    for key in ("taps", "logits"):
        if ours32[key].shape != ref32[key].shape:
            fail(f"{args.fp32}: {key} is {list(ours32[key].shape)}, the reference {list(ref32[key].shape)}")
        row(f"fp32 {key}", ours32[key], ref32[key], 1e-4)
    if args.bf16:
        ref16, _ = reference(args.target, args.drafter, tokens, anchors, torch.bfloat16, args.device)
        ours16 = load_file(args.bf16)
        for key in ("taps", "logits"):
            _, own = difference(ref16[key], ref32[key])
            print(f"{'':<14} (transformers bf16 against its fp32: rel {own:.3e}; topotrain bf16 against it: rel "
                  f"{difference(ours16[key], ref32[key])[1]:.3e})")
            row(f"bf16 {key}", ours16[key], ref16[key], max(3 * own, 2e-2))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
