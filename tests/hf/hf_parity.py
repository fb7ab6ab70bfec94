#!/usr/bin/env python3
"""Reference outputs from HF transformers for topotrain's model parity check (hf_parity).

For small random configs of each family topotrain builds (CASES: Qwen3 dense, Qwen3-MoE,
Llama 3.x with llama3 RoPE scaling, Qwen2 with q/k/v biases) this builds the model with
transformers, writes it with save_pretrained into OUT/<name>/model, and writes
OUT/<name>/reference.safetensors holding a packed batch of documents of several lengths
(tokens, positions, cu_seqlens), HF's fp32 logits for it, the loss and the gradient of every
weight under HF's names; OUT/<name>/reference-rows.safetensors the same for documents of one
length (ROW_CASES only).

Documents are run one by one through HF (its eager attention, fp32), so the reference
never depends on HF's own packing support. The loss is
    sum of next-token cross-entropies within documents + router_aux_loss_coef * aux,
with aux = transformers' load_balancing_loss_func over the router logits of all
documents (concatenated per layer, as one packed batch would give them).

    python3 tests/hf/hf_parity.py OUT_DIR      (tests/hf/model_logits.sh runs it, then hf_parity)

With --export NAME=MODEL_DIR (repeatable) it builds no models: it loads each directory
that topotrain-export wrote with AutoModelForCausalLM.from_pretrained in fp32 and writes
OUT/NAME/reference.safetensors for it, for `hf_parity OUT/NAME --weights CHECKPOINT`
(bench/models/export_check.sh).
"""
import argparse
import json
import os

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)
from transformers.models.qwen3_moe import modeling_qwen3_moe

COMMON = dict(vocab_size=1024, hidden_size=128, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, head_dim=64, max_position_embeddings=512, rms_norm_eps=1e-6)
CASES = {
    "dense": (Qwen3Config, Qwen3ForCausalLM, dict(COMMON, intermediate_size=256, tie_word_embeddings=True)),
    # moe_intermediate_size 48 keeps 2*I != hidden, so fused expert layouts are unambiguous.
    "moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM,
            dict(COMMON, intermediate_size=256, moe_intermediate_size=48, num_experts=8, num_experts_per_tok=2,
                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], router_aux_loss_coef=0.01,
                 tie_word_embeddings=False, head_dim=32)),
    # Every expert chosen: no top-k boundary for bf16 rounding of the router input to cross,
    # so this case holds the bf16 expert path to the dense bounds whatever the seed.
    "moe_all": (Qwen3MoeConfig, Qwen3MoeForCausalLM,
                dict(COMMON, intermediate_size=256, moe_intermediate_size=48, num_experts=4, num_experts_per_tok=4,
                     norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], router_aux_loss_coef=0.01,
                     tie_word_embeddings=False)),
    # Llama 3.x: no q/k norm, untied, head_dim apart from hidden / heads (48, not 32), and RoPE
    # scaling of rope_type llama3 with original_max_position_embeddings 32, so that the
    # documents' positions (up to 89) meet all three bands: wavelengths kept (< 8), blended
    # (8-32) and stretched by the factor (> 32).
    "llama": (LlamaConfig, LlamaForCausalLM,
              dict(COMMON, intermediate_size=256, tie_word_embeddings=False, head_dim=48,
                   rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                                        high_freq_factor=4.0, original_max_position_embeddings=32))),
    # Qwen2/2.5: biases on q, k and v (random here: HF initialises them at zero), no q/k norm,
    # tied, head_dim 64 apart from hidden / heads, its sliding-window setting off as Qwen2.5's
    # configs have it.
    "qwen2": (Qwen2Config, Qwen2ForCausalLM,
              dict(COMMON, intermediate_size=256, tie_word_embeddings=True,
                   rope_parameters=dict(rope_type="default", rope_theta=1000000.0), use_sliding_window=False)),
}
DOC_LENGTHS = [37, 64, 5, 90]
# Documents of one length: the packed batch is a dense grid as it is (cuDNN's kernel on a GPU).
# Not for "moe": with top-2 routing, bf16 rounding of the router input can flip a choice on a
# new batch (it did on this one, to a logits error of 4e-2 under math attention too), which
# the bf16 bounds do not cover; "moe_all" holds the grid to them with MoE layers.
ROW_LENGTHS = [48, 48, 48, 48]
ROW_CASES = ("dense", "moe_all")


def hf_expert_layout(tensors, cfg):
    """Per-expert names for any fused expert tensors (newer transformers keep experts
    stacked as experts.gate_up_proj [E, 2I, H] and experts.down_proj [E, H, I])."""
    out = {}
    inter, hidden = getattr(cfg, "moe_intermediate_size", 0), cfg.hidden_size
    for name, t in tensors.items():
        if name.endswith("experts.gate_up_proj"):
            prefix = name[: -len("gate_up_proj")]
            if t.shape[1:] == (hidden, 2 * inter):
                t = t.transpose(1, 2)
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.gate_proj.weight"] = t[e, :inter].contiguous()
                out[f"{prefix}{e}.up_proj.weight"] = t[e, inter:].contiguous()
        elif name.endswith("experts.down_proj"):
            prefix = name[: -len("down_proj")]
            if t.shape[1:] == (inter, hidden):
                t = t.transpose(1, 2)
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.down_proj.weight"] = t[e].contiguous()
        else:
            out[name] = t.contiguous()
    return out


def build_case(name, out_dir, seed):
    config_cls, model_cls, fields = CASES[name]
    torch.manual_seed(seed)
    cfg = config_cls(**fields)
    cfg._attn_implementation = "eager"
    model = model_cls(cfg).float().eval()
    with torch.no_grad():
        for parameter_name, parameter in model.named_parameters():
            if parameter_name.endswith(".bias"):
                parameter.normal_(0.0, 0.5)
    model_dir = os.path.join(out_dir, name, "model")
    model.save_pretrained(model_dir, safe_serialization=True)
    with open(os.path.join(model_dir, "config.json")) as f:
        saved = json.load(f)
    shown = {k: v for k, v in saved.items() if "expert" in k or k in ("mlp_only_layers", "decoder_sparse_step")}
    print(f"{name}: config.json as saved by transformers {transformers.__version__}: {shown}")
    # Whatever layout this transformers release saves, leave per-expert HF names on disk.
    for file in sorted(os.listdir(model_dir)):
        if file.endswith(".safetensors"):
            path = os.path.join(model_dir, file)
            save_file(hf_expert_layout(load_file(path), cfg), path, metadata={"format": "pt"})

    is_moe = name.startswith("moe")
    write_reference(model, cfg, is_moe, name, DOC_LENGTHS, os.path.join(out_dir, name, "reference.safetensors"))
    if name in ROW_CASES:
        write_reference(model, cfg, is_moe, name, ROW_LENGTHS,
                        os.path.join(out_dir, name, "reference-rows.safetensors"))


def write_reference(model, cfg, is_moe, name, lengths, path):
    """HF's logits, loss and gradients for a packed batch of random documents of these lengths."""
    docs = [torch.randint(cfg.vocab_size, (n,)) for n in lengths]
    model.zero_grad(set_to_none=True)
    logits, router = [], []
    ce_sum = torch.zeros(())
    for doc in docs:
        kwargs = dict(output_router_logits=True) if is_moe else {}
        out = model(input_ids=doc[None], **kwargs)
        lg = out.logits[0].float()
        logits.append(lg)
        ce_sum = ce_sum + torch.nn.functional.cross_entropy(lg[:-1], doc[1:], reduction="sum")
        if is_moe:
            router.append([r.reshape(-1, cfg.num_experts) for r in out.router_logits if r is not None])
    loss = ce_sum
    aux = torch.zeros(())
    if is_moe:
        per_layer = tuple(torch.cat([doc_router[l] for doc_router in router]) for l in range(len(router[0])))
        aux = modeling_qwen3_moe.load_balancing_loss_func(per_layer, cfg.num_experts, cfg.num_experts_per_tok, None)
        loss = loss + cfg.router_aux_loss_coef * aux
    loss.backward()

    grads = {f"grad.{k}": v for k, v in
             hf_expert_layout({n: p.grad.detach() for n, p in model.named_parameters() if p.grad is not None},
                              cfg).items()}
    cu = [0]
    for d in docs:
        cu.append(cu[-1] + len(d))
    reference = {
        "tokens": torch.cat(docs).to(torch.int64),
        "positions": torch.cat([torch.arange(len(d)) for d in docs]).to(torch.int64),
        "cu_seqlens": torch.tensor(cu, dtype=torch.int32),
        "logits": torch.cat(logits).detach(),
        "ce_sum": ce_sum.detach().reshape(()),
        "aux_loss": aux.detach().reshape(()),
        **grads,
    }
    save_file(reference, path)
    print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, documents {lengths}, "
          f"ce_sum {ce_sum.item():.6f}, aux {aux.item():.6f} -> {path}")


def load_export(name, model_dir, out_dir, seed):
    """The reference for a model topotrain exported, as transformers loads it."""
    torch.manual_seed(seed)
    kwargs = dict(attn_implementation="eager")
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **kwargs)
    except TypeError:  # transformers before 4.56 names it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, **kwargs)
    model = model.float().eval()
    cfg = model.config
    print(f"{name}: {type(model).__name__} from {model_dir} (transformers {transformers.__version__})")
    os.makedirs(os.path.join(out_dir, name), exist_ok=True)
    write_reference(model, cfg, cfg.model_type == "qwen3_moe", name, DOC_LENGTHS,
                    os.path.join(out_dir, name, "reference.safetensors"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--export", action="append", default=[], metavar="NAME=MODEL_DIR",
                        help="a topotrain-export directory to write a reference for (no models are built)")
    args = parser.parse_args()
    if args.export:
        for item in args.export:
            name, sep, model_dir = item.partition("=")
            if not sep or not name or not model_dir:
                parser.error(f"--export {item}: expected NAME=MODEL_DIR")
            load_export(name, model_dir, args.out_dir, args.seed)
        return
    for name in CASES:
        build_case(name, args.out_dir, args.seed)


if __name__ == "__main__":
    main()
