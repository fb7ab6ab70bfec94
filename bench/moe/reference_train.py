#!/usr/bin/env python3
"""PyTorch reference for moe_train: the same model, data order and settings, trained the way a
careful PyTorch user would, so that topotrain's tokens/s can be divided by its tokens/s.

What matches topotrain (src/train/moe_trainer.cpp, src/data, src/model):
  * model: transformers' Qwen3MoeForCausalLM built from a config with moe-500m's fields
    (src/model/config.cpp) or from --config's config.json (moe_train's model.config), fp32
    parameters, bf16 autocast on CUDA;
  * data: the HDF5 token dataset read whole into memory; the epoch permutation (splitmix64 +
    Lemire's bounded draw), the token_budget packer (no padding; a sample longer than the
    budget is split, positions continue) and the interleaved dealing of a step's W*A
    micro-batches (rank r takes k*W + r) are ported line for line, so both train the same
    samples in the same order (check with --sample-log against moe_train's log.samples);
  * loss: sum of next-token cross-entropy within each document / the step's global target
    count, plus router_aux_loss_coef * HF's load-balancing loss * (micro-batch tokens /
    global tokens), exactly topotrain's normalisation;
  * optimizer: torch.optim.AdamW(fused=True) on CUDA, weight decay on matrices only, betas
    (0.9, 0.95), eps 1e-8; gradients clipped to global norm 1.0; the LR follows topotrain's
    token-based warmup + cosine schedule (train.lr, min_lr_ratio 0.1, warmup 0.04 of one epoch);
  * data parallel: DistributedDataParallel (NCCL), no_sync() on the first grad_accum - 1
    micro-batches; one GPU runs without DDP, as a one-GPU user would.

Packed attention: HF's "sdpa" path would build a dense [T, T] block-causal mask for a packed
row (16K x 16K) and fall off the flash kernel. Instead a custom attention function is
registered through transformers' AttentionInterface: it runs torch's
scaled_dot_product_attention(is_causal=True) once per document of the packed row (the
document lengths are known on the host, so no synchronisation), which takes the flash kernel
with the exact causal-within-document mask that topotrain's flash varlen kernel computes.
Because the name is not a mask-building implementation, HF creates no mask at all. cuDNN's
SDPA backend is switched off: it re-plans for every new document length (~5 ms host time per
call), so SDPA takes the flash kernel (GQA inside the kernel when torch supports it there).

Experts: transformers' grouped_mm experts (torch._grouped_mm) when it computes in bf16 under
autocast; otherwise (torch._grouped_mm outside autocast's cast list) an equivalent
function registered through transformers' ExpertsInterface that casts to bf16 first.
--experts eager selects HF's per-expert loop.

Launch, one process per GPU, on one host:
    mpirun -np 2 python3 bench/moe/reference_train.py --data D.h5 --grad-accum 10 ...
(Open MPI's OMPI_COMM_WORLD_* or torchrun's RANK/WORLD_SIZE/LOCAL_RANK are read; the
rendezvous is tcp://127.0.0.1:$MASTER_PORT.) CPU smoke test without torch.distributed:
    python3 bench/moe/reference_train.py --data tiny.h5 --device cpu --tiny --steps 3
Rank 0 prints a JSON line 'RESULT {...}' (and writes it to --result) with tokens/s over the
steps after --warmup.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

import numpy as np

MASK64 = (1 << 64) - 1

# Model shapes: the fields of topotrain's presets (src/model/config.cpp), HF's names.
COMMON_FIELDS = dict(
    rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=40960, initializer_range=0.02,
    norm_topk_prob=True, router_aux_loss_coef=0.001, decoder_sparse_step=1, hidden_act="silu",
    attention_bias=False, use_sliding_window=False, use_cache=False, output_router_logits=True)
PRESETS = {
    "moe-500m": dict(vocab_size=151936, hidden_size=768, intermediate_size=2048, num_hidden_layers=16,
                     num_attention_heads=8, num_key_value_heads=4, head_dim=128, num_experts=8,
                     num_experts_per_tok=2, moe_intermediate_size=768, mlp_only_layers=[]),
    "tiny-moe": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
                     num_experts_per_tok=2, moe_intermediate_size=32, mlp_only_layers=[1],
                     max_position_embeddings=4096),
}
ROPE_THETA = 1e6
H100_H200_PEAK_BF16 = 989.4e12  # what topotrain's peak_flops() assumes for H100/H200


def fail(message):
    sys.stderr.write(f"reference_train.py: error: {message}\n")
    sys.exit(2)


# ---------------------------------------------------------------- data (port of src/data)
class SplitMix64:
    def __init__(self, state):
        self.state = state & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, bound):
        m = self.next() * bound
        low = m & MASK64
        if low < bound:
            threshold = ((1 << 64) - bound) % bound
            while low < threshold:
                m = self.next() * bound
                low = m & MASK64
        return m >> 64


def epoch_permutation(seed, epoch, n):
    order = list(range(n))
    seeder = SplitMix64(seed)
    rng = SplitMix64(seeder.next() ^ ((epoch * 0xD1B54A32D192ED03) & MASK64))
    for i in range(n, 1, -1):
        j = rng.below(i)
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


class TokenDataset:
    def __init__(self, path):
        try:
            import h5py
        except ImportError:
            fail("h5py is missing")
        if not os.path.exists(path):
            fail(f"dataset '{path}' does not exist (make one with bench/moe/make_dataset.py)")
        with h5py.File(path, "r") as f:
            if "tokens" not in f or "offsets" not in f:
                fail(f"'{path}' is not a topotrain token dataset (needs /tokens and /offsets)")
            self.tokens = f["tokens"][:]
            self.offsets = f["offsets"][:].astype(np.int64)
            self.vocab_size = int(f.attrs["vocab_size"])
        self.lengths = np.diff(self.offsets)
        if self.lengths.size == 0 or (self.lengths <= 0).any():
            fail(f"'{path}' has no documents or an empty one")
        self.num_samples = int(self.lengths.size)
        self.num_tokens = int(self.offsets[-1])


class Packer:
    """TokenBudgetPacker::next_layout: pieces (sample, begin, end) of at most budget tokens."""

    def __init__(self, dataset, budget, seed):
        self.lengths = [int(n) for n in dataset.lengths]
        self.budget = budget
        self.seed = seed
        self.epoch = 0
        self.consumed = 0
        self.offset = 0
        self.order = epoch_permutation(seed, 0, len(self.lengths))

    def advance_sample(self):
        self.offset = 0
        self.consumed += 1
        if self.consumed == len(self.order):
            self.consumed = 0
            self.epoch += 1
            self.order = epoch_permutation(self.seed, self.epoch, len(self.order))

    def next_layout(self):
        pieces, total = [], 0
        while total < self.budget:
            sample = self.order[self.consumed]
            begin, length = self.offset, self.lengths[sample]
            end = length
            if length - begin > self.budget - total:
                if total > 0:
                    break
                end = begin + self.budget
            pieces.append((sample, begin, end))
            total += end - begin
            if end == length:  # data.long_samples = split (topotrain's default)
                self.advance_sample()
            else:
                self.offset = end
        return pieces


class StepPlanner:
    """StepPlanner::next_step: rank r takes global micro-batches k*W + r, k = 0..A-1."""

    def __init__(self, dataset, budget, seed, world, rank, grad_accum):
        self.packer = Packer(dataset, budget, seed)
        self.world, self.rank, self.grad_accum = world, rank, grad_accum

    def next_step(self):
        mine, global_tokens, global_sequences = [], 0, 0
        for index in range(self.world * self.grad_accum):
            pieces = self.packer.next_layout()
            global_tokens += sum(e - b for _, b, e in pieces)
            global_sequences += len(pieces)
            if index % self.world == self.rank:
                mine.append(pieces)
        return mine, global_tokens, global_sequences


def materialize(dataset, pieces):
    """Host arrays of one packed micro-batch: tokens, positions, document lengths, and the
    rows that have a next-token target (all but each document's last) with their targets."""
    tokens = np.concatenate([dataset.tokens[dataset.offsets[s] + b: dataset.offsets[s] + e] for s, b, e in pieces])
    tokens = tokens.astype(np.int64)
    positions = np.concatenate([np.arange(b, e, dtype=np.int64) for _, b, e in pieces])
    lengths = [e - b for _, b, e in pieces]
    has_target = np.ones(tokens.size, dtype=bool)
    has_target[np.cumsum(lengths) - 1] = False
    rows = np.nonzero(has_target)[0].astype(np.int64)
    return tokens, positions, lengths, rows, tokens[rows + 1]


# ---------------------------------------------------------------- schedule and FLOPs
def learning_rate(tokens, peak, min_ratio, warmup, total_tokens):
    """train/lr_schedule.cpp: linear warmup from above zero, then cosine to min_ratio * peak."""
    if total_tokens <= 0:
        return peak
    warmup_tokens = warmup * total_tokens
    if tokens < warmup_tokens:
        return peak * (tokens + 1.0) / (warmup_tokens + 1.0)
    span = max(1.0, total_tokens - warmup_tokens)
    progress = min(1.0, (tokens - warmup_tokens) / span)
    floor = peak * min_ratio
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def flops_per_token(config, mean_document_tokens):
    """moe_trainer.cpp's flops_per_token: 6 x active matmul weights (lm_head in, embedding
    lookup out) + 12 x layers x heads x head_dim x mean attended context."""
    h, layers = config.hidden_size, config.num_hidden_layers
    heads, kv, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    attention_weights = h * heads * d * 2 + h * kv * d * 2 + 2 * d + 2 * h  # + q/k norms, layer norms
    matmul = config.vocab_size * h + h  # lm_head, final norm (count_parameters' active weights)
    for layer in range(layers):
        matmul += attention_weights
        if layer in config.mlp_only_layers:
            matmul += 3 * h * config.intermediate_size
        else:
            matmul += config.num_experts * h + config.num_experts_per_tok * 3 * h * config.moe_intermediate_size
    return 6.0 * matmul + 12.0 * layers * heads * d * (mean_document_tokens / 2.0)


# ---------------------------------------------------------------- model
class PackedRow:
    """Document lengths of the micro-batch being run, read by the attention function."""
    lengths = None


PACKED = PackedRow()


def make_packed_attention(torch, use_gqa_flag):
    F = torch.nn.functional

    def packed_causal_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        # query [1, Hq, T, D], key/value [1, Hkv, T, D]. Under autocast q/k leave HF's fp32
        # RMSNorm in fp32 while v is bf16: run all three in v's dtype, as SDPA's autocast would.
        query, key = query.to(value.dtype), key.to(value.dtype)
        extra = {}
        groups = query.shape[1] // key.shape[1]
        if groups > 1:
            if use_gqa_flag:
                extra["enable_gqa"] = True
            else:
                key = key.repeat_interleave(groups, dim=1)
                value = value.repeat_interleave(groups, dim=1)
        lengths = PACKED.lengths
        outputs = [F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling, **extra)
                   for q, k, v in zip(query.split(lengths, 2), key.split(lengths, 2), value.split(lengths, 2))]
        return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None

    return packed_causal_attention


def make_bf16_grouped_mm_experts(torch):
    """HF's grouped_mm experts with the weights and rows cast to the autocast dtype first
    (torch._grouped_mm is not on autocast's cast list)."""
    def experts_forward(self, hidden_states, top_k_index, top_k_weights):
        dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else hidden_states.dtype
        num_experts = self.gate_up_proj.size(0)
        top_k = top_k_index.size(-1)
        flat = top_k_index.reshape(-1)
        order = torch.argsort(flat, stable=True)
        rows = order // top_k
        counts = torch.histc(flat.float(), bins=num_experts, min=0, max=num_experts - 1)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        x = hidden_states.to(dtype)[rows]
        gate_up = torch._grouped_mm(x, self.gate_up_proj.to(dtype).transpose(-2, -1), offs=offsets)
        gate, up = gate_up.chunk(2, dim=-1)
        y = torch._grouped_mm(self.act_fn(gate) * up, self.down_proj.to(dtype).transpose(-2, -1), offs=offsets)
        y = y * top_k_weights.reshape(-1)[order].to(dtype).unsqueeze(-1)
        return torch.zeros_like(hidden_states).index_add_(0, rows, y.to(hidden_states.dtype))

    return experts_forward


def expert_loads(torch, router_logits, top_k, num_experts):
    """Per MoE layer of one forward, the busiest expert's selections over the mean per expert;
    the largest is moe_train's peak expert load (src/model/moe.cpp peak_expert_load)."""
    loads = []
    for logits in router_logits:
        if logits is None:  # a layer of mlp_only_layers
            continue
        chosen = logits.topk(top_k, -1).indices.reshape(-1)
        counts = torch.bincount(chosen, minlength=num_experts).float()
        loads.append((counts.max() / counts.mean()).item())
    return loads


def hf_config(transformers, args):
    """The model's HF config: --config's config.json as written (moe_train's model.config reads
    the same file), or a preset's fields with topotrain's RoPE base."""
    if args.config:
        return transformers.Qwen3MoeConfig.from_json_file(args.config)
    config = transformers.Qwen3MoeConfig(**dict(COMMON_FIELDS, **PRESETS[args.preset]))
    # transformers 5 keeps RoPE settings in rope_parameters, 4.x in rope_theta.
    rope = getattr(config, "rope_parameters", None)
    if isinstance(rope, dict) or hasattr(config, "rope_parameters"):
        rope = dict(rope or {})
        rope.setdefault("rope_type", "default")
        rope["rope_theta"] = ROPE_THETA
        config.rope_parameters = rope
    config.rope_theta = ROPE_THETA
    return config


def rope_theta(config):
    rope = getattr(config, "rope_parameters", None)  # transformers 5; 4.x: rope_theta
    return rope["rope_theta"] if isinstance(rope, dict) and "rope_theta" in rope else config.rope_theta


def set_implementation(model, attribute, value):
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, attribute):
            setattr(config, attribute, value)


def build_model(torch, args, config, device):
    import transformers
    from transformers import AttentionInterface

    use_gqa_flag = False
    if device.type == "cuda":
        # cuDNN's SDPA plans a graph for every new sequence length (~5 ms of host time per
        # call, measured on an H200), and every document of a packed row has its own length:
        # leave it out so that SDPA takes the flash kernel.
        torch.backends.cuda.enable_cudnn_sdp(False)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q = torch.randn(1, 8, 256, 128, device=device, dtype=torch.bfloat16)
        k = torch.randn(1, 4, 256, 128, device=device, dtype=torch.bfloat16)
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
            use_gqa_flag = True
        except (RuntimeError, TypeError):
            use_gqa_flag = False
    AttentionInterface.register("packed_sdpa", make_packed_attention(torch, use_gqa_flag))

    with torch.device(device):
        try:
            model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="packed_sdpa")
        except (TypeError, ValueError):
            config._attn_implementation = "packed_sdpa"
            model = transformers.AutoModelForCausalLM.from_config(config)
    model = model.float().to(device)
    set_implementation(model, "_attn_implementation", "packed_sdpa")
    attention = "per-document SDPA" + (" (GQA in kernel)" if use_gqa_flag else " (k/v repeated)")

    experts = args.experts
    if experts == "auto":
        experts = "eager"
        if device.type == "cuda" and hasattr(torch, "_grouped_mm"):
            experts = "grouped_mm"
            x = torch.randn(64, 64, device=device)
            w = torch.randn(2, 64, 64, device=device)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                try:
                    computes_bf16 = torch._grouped_mm(x, w, offs=torch.tensor([32, 64], device=device,
                                                                              dtype=torch.int32)).dtype == torch.bfloat16
                except RuntimeError:
                    computes_bf16 = False
            if not computes_bf16:
                experts = "grouped_mm_bf16"
    if experts == "grouped_mm_bf16":
        try:
            from transformers.integrations.moe import ExpertsInterface
        except ImportError:
            fail("--experts grouped_mm_bf16 needs transformers >= 5 (ExpertsInterface)")
        ExpertsInterface.register("grouped_mm_bf16", make_bf16_grouped_mm_experts(torch))
    if experts != "eager" and not any(hasattr(m, "config") and hasattr(m.config, "_experts_implementation")
                                      for m in model.modules()):
        fail(f"--experts {experts}: this transformers ({transformers.__version__}) has no experts implementations; "
             "use --experts eager")
    set_implementation(model, "_experts_implementation", experts)

    rotary = next((m for m in model.modules() if hasattr(m, "inv_freq")), None)
    if rotary is not None:
        expected = rope_theta(config) ** (-2.0 / config.head_dim)
        if abs(float(rotary.inv_freq[1]) - expected) > 1e-6 * expected + 1e-12:
            print(f"warning: RoPE inv_freq[1] = {float(rotary.inv_freq[1]):.3e}, expected {expected:.3e} "
                  f"(rope_theta {rope_theta(config):g} not taken by this transformers)", flush=True)
    return model, attention, experts


# ---------------------------------------------------------------- distributed
def distributed_env():
    env = os.environ
    for rank_key, size_key, local_key in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                                          ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                                          ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID")):
        if rank_key in env and size_key in env:
            rank, world = int(env[rank_key]), int(env[size_key])
            return rank, world, int(env.get(local_key, rank))
    return 0, 1, 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="topotrain HDF5 token dataset")
    parser.add_argument("--preset", default="moe-500m", choices=sorted(PRESETS))
    parser.add_argument("--tiny", action="store_true", help="--preset tiny-moe (CPU smoke tests)")
    parser.add_argument("--config", help="an HF Qwen3Moe config.json instead of --preset (e.g. the one "
                                         "bench/moe/reference_shape.py writes), as moe_train's model.config")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--token-budget", type=int, default=16384)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps to run")
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of tokens/s")
    parser.add_argument("--lr", type=float, default=6e-4)
    parser.add_argument("--min-lr-ratio", type=float, default=0.1)
    parser.add_argument("--lr-warmup", type=float, default=0.04, help="fraction of the schedule's tokens")
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    parser.add_argument("--experts", default="auto", choices=["auto", "grouped_mm", "grouped_mm_bf16", "eager"])
    parser.add_argument("--ddp-on-one-gpu", action="store_true", help="wrap in DDP even when world size is 1")
    parser.add_argument("--sample-log", help="directory for samples-rank-N.txt (moe_train's log.samples format)")
    parser.add_argument("--result", help="rank 0 writes the result JSON here")
    args = parser.parse_args()
    if args.tiny:
        if args.config:
            fail("--tiny and --config: give one model")
        args.preset = "tiny-moe"
    if args.token_budget < 1 or args.grad_accum < 1 or args.steps < 1 or args.warmup < 0:
        fail("--token-budget, --grad-accum and --steps must be >= 1, --warmup >= 0")
    if args.warmup >= args.steps:
        fail(f"--warmup {args.warmup} leaves no measured step of --steps {args.steps}")

    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        fail("torch is missing: run this on the GPU machine (or any machine with torch + transformers)")
    rank, world, local_rank = distributed_env()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            fail("--device cuda but torch sees no GPU (use --device cpu for a smoke test)")
        if local_rank >= torch.cuda.device_count():
            fail(f"rank {rank}: local rank {local_rank} but only {torch.cuda.device_count()} GPUs")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, world)))
    ddp = world > 1 or args.ddp_on_one_gpu
    if ddp:
        port = os.environ.get("MASTER_PORT", "29517")
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                **({"device_id": device} if device.type == "cuda" else {}))
    log = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)

    import transformers
    config = hf_config(transformers, args)
    dataset = TokenDataset(args.data)
    if dataset.vocab_size > config.vocab_size:
        fail(f"dataset vocab_size {dataset.vocab_size} exceeds the model's {config.vocab_size}")
    torch.manual_seed(args.seed)
    model, attention, experts = build_model(torch, args, config, device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"reference: torch {torch.__version__}, {args.config or args.preset} {n_params / 1e6:.1f}M parameters, "
        f"attention {attention}, experts {experts}, {world} rank(s) x {args.grad_accum} micro-batches of "
        f"{args.token_budget} tokens, "
        f"device {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}")

    if ddp:
        from torch.nn.parallel import DistributedDataParallel
        net = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None,
                                      bucket_cap_mb=args.bucket_mb, gradient_as_bucket_view=True)
    else:
        net = model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    planner = StepPlanner(dataset, args.token_budget, args.seed, world, rank, args.grad_accum)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    aux_coef = config.router_aux_loss_coef
    pin = device.type == "cuda"
    sample_log = None
    if args.sample_log:
        os.makedirs(args.sample_log, exist_ok=True)
        sample_log = open(os.path.join(args.sample_log, f"samples-rank-{rank}.txt"), "a")

    def to_device(array):
        tensor = torch.from_numpy(array)
        return (tensor.pin_memory() if pin else tensor).to(device, non_blocking=True)

    tokens_done, measured_tokens, measured_seconds, losses = 0, 0, 0.0, []
    for step in range(1, args.steps + 1):
        started = time.perf_counter()
        mine, global_tokens, global_sequences = planner.next_step()
        global_targets = global_tokens - global_sequences
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        for m, pieces in enumerate(mine):
            if sample_log:
                sample_log.writelines(f"{s} {b} {e}\n" for s, b, e in pieces)
                sample_log.flush()
            tokens, positions, lengths, rows, targets = materialize(dataset, pieces)
            input_ids, position_ids = to_device(tokens).unsqueeze(0), to_device(positions).unsqueeze(0)
            rows_d, targets_d = to_device(rows), to_device(targets)
            PACKED.lengths = lengths
            last = m == len(mine) - 1
            sync_context = net.no_sync() if ddp and not last else contextlib.nullcontext()
            with sync_context:
                with autocast:
                    out = net(input_ids=input_ids, position_ids=position_ids, use_cache=False,
                              output_router_logits=True, logits_to_keep=rows_d)
                ce_sum = torch.nn.functional.cross_entropy(out.logits[0].float(), targets_d, reduction="sum")
                share = len(tokens) / global_tokens
                aux = out.aux_loss if out.aux_loss is not None else torch.zeros((), device=device)
                # DDP averages gradients over ranks; topotrain sums them: scale by world.
                loss = (ce_sum / global_targets + aux.float() * (aux_coef * share)) * world
                loss.backward()
            loss_sum += ce_sum.detach()
        lr = learning_rate(tokens_done, args.lr, args.min_lr_ratio, args.lr_warmup, dataset.num_tokens)
        for group in optimizer.param_groups:
            group["lr"] = lr
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip) if args.clip > 0 else None
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if ddp:
            dist.all_reduce(loss_sum)
        step_loss = loss_sum.item() / global_targets  # the step's one host synchronisation, as in topotrain
        seconds = time.perf_counter() - started
        tokens_done += global_tokens
        losses.append(step_loss)
        if step > args.warmup:
            measured_tokens += global_tokens
            measured_seconds += seconds
        log(f"step {step} | loss {step_loss:.4f} | lr {lr:.2e} | gnorm "
            f"{float(grad_norm) if grad_norm is not None else float('nan'):.3g} | {global_tokens} tokens in "
            f"{seconds * 1e3:.0f} ms = {global_tokens / seconds / 1e3:.1f} Ktok/s")
    if sample_log:
        sample_log.close()

    tokens_per_s = measured_tokens / measured_seconds
    # The routing the reference trained in, read after the timed steps from the last micro-batch
    # (one micro-batch, where moe_train's figure is a mean over the measured steps).
    expert_load = max(expert_loads(torch, out.router_logits, config.num_experts_per_tok, config.num_experts))
    fpt = flops_per_token(config, dataset.num_tokens / dataset.num_samples)
    peak = 0.0
    if device.type == "cuda" and any(n in torch.cuda.get_device_name(device) for n in ("H100", "H200")):
        peak = H100_H200_PEAK_BF16
    result = dict(impl="reference", world=world, grad_accum=args.grad_accum, token_budget=args.token_budget,
                  steps=args.steps, warmup=args.warmup, tokens_per_s=tokens_per_s,
                  tokens_per_s_per_gpu=tokens_per_s / world,
                  mfu=(fpt * tokens_per_s / (peak * world)) if peak > 0 else None,
                  step_ms=1e3 * measured_seconds / (args.steps - args.warmup),
                  peak_memory_gib=(torch.cuda.max_memory_allocated(device) / 2**30) if device.type == "cuda" else None,
                  attention=attention, experts=experts, ddp=ddp, expert_load_last=expert_load,
                  first_loss=losses[0], last_loss=losses[-1],
                  torch=torch.__version__, nccl_p2p_disable=os.environ.get("NCCL_P2P_DISABLE", ""))
    log("RESULT " + json.dumps(result))
    if rank == 0 and args.result:
        with open(args.result, "w") as f:
            json.dump(result, f, indent=1)
    if ddp:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
