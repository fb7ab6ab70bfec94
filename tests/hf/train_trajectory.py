#!/usr/bin/env python3
"""Ten optimizer steps of moe_train against transformers + torch.optim.AdamW on the same batches.

What is checked: a tiny model of one family (--family: Qwen3-MoE with one MoE layer and one
dense layer, the default; Llama 3.x with llama3 RoPE scaling, untied; Qwen2 with random q/k/v
biases, tied) with random weights saved by transformers' save_pretrained is trained by moe_train for 10 optimizer steps on 2 CPU ranks at
grad_accum 2, fp32, with gradient clipping active on every step, a warmup + cosine LR schedule
and weight decay. The same model, loaded by transformers, is trained in one process by
torch.optim.AdamW on the same packed micro-batches. Per step, the LM loss, the router's aux
loss (MoE only), the gradient norm before clipping and the learning rate in moe_train's metrics.jsonl must
match the reference's; after the last step, every weight of the checkpoint topotrain-export
writes must match the reference's.

How the reference is written (transformers' and torch's own APIs, no topotrain code):
  * data: the documents are ASCII texts; topotrain-prepare's byte tokenizer (docs/data.md: ids
    0..255 are the bytes, 256 is the eos ending each document) gives their ids. Every document
    is longer than token_budget / 3 and at most token_budget / 2 tokens, so whatever the sample
    order every micro-batch holds exactly two whole documents (docs/data.md, "Packing"): the
    micro-batches are read from moe_train's log.samples (each rank's pieces in training order,
    two lines per micro-batch, grad_accum micro-batches per step), i.e. the batches it trained;
  * a micro-batch is one row of packed documents with positions restarting at 0: transformers
    builds the block-causal mask from position_ids itself (masking_utils' packed sequences);
  * loss (docs/data.md, "Data parallelism"): per micro-batch, the summed next-token cross-entropy
    within each document / the step's global target count, plus router_aux_loss_coef x HF's
    load-balancing loss (out.aux_loss) x the micro-batch's share of the step's tokens; the
    gradients of all W x grad_accum micro-batches are summed, as the ranks' all-reduce does;
  * clip_grad_norm_ to train.clip, then AdamW with weight decay on parameters of 2 or more
    dimensions only (not the norms), betas and eps as set, the LR of
    bench/moe/reference_train.py's learning_rate (linear warmup from above zero, cosine to
    min_lr_ratio) over the 10 steps (train.schedule = "steps").

Bounds (fp32 on both sides; the two differ only by rounding in another order of operations,
measured here with 20x or more to spare):
  * per step, relative to the reference: loss 1e-6 (measured <= 6e-8), aux_loss 1e-5 (<= 6e-7), the
    gradient norm before clipping 1e-5 (<= 4e-7), the learning rate 1e-9 (both compute it in
    double: equal);
  * per weight tensor, ||final - reference final|| <= 1e-4 x ||reference final - initial||, the
    error relative to what the ten steps changed (measured <= 4e-6; Qwen2's k_proj.bias, whose
    gradient is zero but for rounding, relative to ||reference final|| instead). Adam divides by the root of
    the running squared gradient, which passes relative gradient noise on to the update whole,
    and the steps compound it; at train.lr 2e-2 the trajectory turns steep enough (a gradient
    norm spike of 6, mostly the embedding's) that the noise grows to 6e-5 in one step, so the
    rate stays at 1e-2.
The seeded bugs named in the commit that added this test break these by far.

Run by ctest (hf_train_trajectory) with TOPOTRAIN_BIN and TOPOTRAIN_PYTHON set; by hand:
    TOPOTRAIN_BIN=build/bin python3 tests/hf/train_trajectory.py [--keep DIR]
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "moe"))
from reference_train import learning_rate  # noqa: E402  (the schedule's Python port, torch-free)

RANKS, GRAD_ACCUM, STEPS = 2, 2, 10
TOKEN_BUDGET = 48  # documents of 17..24 tokens: two per micro-batch, never three
DOCUMENTS = 96  # 80 are trained: one epoch is not used up, so the order is one permutation
EOS = 256  # the byte tokenizer's <|endoftext|>
SETTINGS = dict(lr=1e-2, min_lr_ratio=0.1, warmup=0.3, weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8, clip=0.05)
BOUNDS = dict(loss=1e-6, aux_loss=1e-5, grad_norm=1e-5, lr=1e-9, weights=1e-4)


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def documents():
    """ASCII texts of 16..23 bytes (17..24 tokens with the eos), words of a small vocabulary so
    that ten steps learn something; no '<' (the byte tokenizer's special tokens start with it)."""
    words = ("the cat sat on a mat and the dog ran to it while we saw an old red fox jump over "
             "some big box of hay near our barn at dawn").split()
    rng = random.Random(7)
    texts = []
    while len(texts) < DOCUMENTS:
        length = rng.randint(TOKEN_BUDGET // 3, TOKEN_BUDGET // 2 - 1)
        text = ""
        while len(text) < length:
            text += rng.choice(words) + " "
        text = text[:length].strip()
        if len(text) == length:
            texts.append(text)
    return texts


SHAPE = dict(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, max_position_embeddings=256, rms_norm_eps=1e-6)
FAMILIES = {
    "qwen3_moe": lambda: transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        **SHAPE, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, mlp_only_layers=[1],
        norm_topk_prob=True, router_aux_loss_coef=0.01, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # head_dim 8 at theta 10000: RoPE's wavelengths 6.3, 63, 628, 6283 fall in all three of
    # llama3's bands for original_max_position_embeddings 64 (kept < 16, blended 16-64, stretched > 64).
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
        **SHAPE, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        **SHAPE, tie_word_embeddings=True, use_sliding_window=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}


def save_initial_model(folder, family):
    """A tiny model of `family` in transformers' random initialisation, norms spread out (HF
    initialises them to 1), and so are Qwen2's q/k/v biases (HF: 0) and the MoE router (HF: std
    0.02): weights a loader could confuse differ, and the top-2 choices win by margins (>= 7e-5
    in probability, measured over the ten steps) far above rounding, so both sides route every
    token alike."""
    torch.manual_seed(11)
    model = FAMILIES[family]()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
            elif name.endswith("mlp.gate.weight"):
                p.normal_(0.0, 0.3)
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.3)
    model.save_pretrained(folder)


def run(command, log):
    print("+ " + " ".join(command), flush=True)
    with open(log, "w") as out:
        code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        sys.stdout.write(open(log).read())
        fail(f"{os.path.basename(command[0])} exited {code} (output above)")


def train_topotrain(bin_dir, work, hf_init, texts):
    corpus = os.path.join(work, "corpus.jsonl")
    with open(corpus, "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    data = os.path.join(work, "data.h5")
    run([os.path.join(bin_dir, "topotrain-prepare"), "-o", data, "--tokenizer", "byte", corpus],
        os.path.join(work, "prepare.log"))
    topology = os.path.join(work, "cpu2.toml")
    with open(topology, "w") as f:
        f.write('[topology]\nname = "cpu2"\ninterconnect = "cpu"\n'
                '[[roles]]\nrole = "trainer"\nranks = [0, 1]\ndevices = "cpu"\n')
    sets = dict(SETTINGS, token_budget=TOKEN_BUDGET, grad_accum=GRAD_ACCUM, max_steps=STEPS, schedule="steps")
    command = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "-np", str(RANKS),
               "-x", "OMP_NUM_THREADS=1", os.path.join(bin_dir, "moe_train"), topology,
               "--set", "model.preset=", "--set", f"model.weights={hf_init}", "--set", "model.dtype=fp32",
               "--set", f"data.path={data}", "--set", f"checkpoint.dir={work}", "--set", "checkpoint.run=run",
               "--set", "checkpoint.every_steps=0", "--set", "log.samples=true", "--set", "log.every=1"]
    for key, value in sets.items():
        command += ["--set", f"train.{key}={value}"]
    run(command, os.path.join(work, "moe_train.log"))
    run_dir = os.path.join(work, "run")
    exported = os.path.join(work, "exported")
    run([os.path.join(bin_dir, "topotrain-export"), "--dtype", "fp32", run_dir, exported], os.path.join(work, "export.log"))
    return run_dir, exported


def read_metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if [m["step"] for m in lines] != list(range(1, STEPS + 1)):
        fail(f"metrics.jsonl holds steps {[m['step'] for m in lines]}, expected 1..{STEPS}")
    return lines


def read_micro_batches(run_dir, docs):
    """Per step, the W x grad_accum micro-batches in their global order (k x W + r), each a list
    of sample ids: two log.samples lines per micro-batch (see the docstring)."""
    pieces = []
    for rank in range(RANKS):
        with open(os.path.join(run_dir, f"samples-rank-{rank}.txt")) as f:
            rows = [tuple(int(v) for v in line.split()) for line in f if line.strip()]
        if len(rows) != 2 * GRAD_ACCUM * STEPS:
            fail(f"samples-rank-{rank}.txt lists {len(rows)} pieces, expected two per micro-batch: "
                 f"{2 * GRAD_ACCUM * STEPS}")
        for sample, begin, end in rows:
            if sample >= len(docs) or begin != 0 or end != len(docs[sample]):
                fail(f"samples-rank-{rank}.txt: piece {sample} {begin} {end} is not whole document {sample} of "
                     f"{len(docs[sample]) if sample < len(docs) else '?'} tokens: the byte tokenizer's ids or the "
                     "document order are not what this test assumes")
        pieces.append([[rows[2 * m][0], rows[2 * m + 1][0]] for m in range(GRAD_ACCUM * STEPS)])
    steps = [[pieces[r][s * GRAD_ACCUM + k] for k in range(GRAD_ACCUM) for r in range(RANKS)] for s in range(STEPS)]
    trained = [i for step in steps for mb in step for i in mb]
    if len(set(trained)) != len(trained):
        fail("a document was trained twice in one epoch: the log does not list what this test assumes")
    return steps


def check_packed_attention(model, pieces):
    """The reference's premise: transformers masks a packed row per document (it reads the
    documents from position_ids restarting at 0 when no attention_mask and no cache is given)."""
    with torch.no_grad():
        packed = model(input_ids=torch.tensor([t for p in pieces for t in p])[None],
                       position_ids=torch.cat([torch.arange(len(p)) for p in pieces])[None], use_cache=False).logits[0]
        alone = torch.cat([model(input_ids=torch.tensor(p)[None], use_cache=False).logits[0] for p in pieces])
    difference = (packed - alone).abs().max().item()
    if difference > 1e-5:
        fail(f"transformers {transformers.__version__} attends across the documents of a packed row (logits differ "
             f"by {difference:.2e} from each document alone): the reference needs another attention mask")


def train_reference(hf_init, docs, steps):
    """transformers + torch.optim.AdamW over the same micro-batches; returns per-step metrics
    and the model."""
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_init, dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    config = model.config
    moe = config.model_type == "qwen3_moe"
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": SETTINGS["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=SETTINGS["lr"], betas=(SETTINGS["beta1"], SETTINGS["beta2"]), eps=SETTINGS["eps"])
    check_packed_attention(model, [docs[i] for i in steps[0][0]])
    metrics = []
    for index, micro_batches in enumerate(steps):
        global_tokens = sum(len(docs[i]) for mb in micro_batches for i in mb)
        global_targets = sum(len(docs[i]) - 1 for mb in micro_batches for i in mb)
        loss_sum, aux_sum = 0.0, 0.0
        for mb in micro_batches:
            tokens = torch.tensor([t for i in mb for t in docs[i]])
            positions = torch.cat([torch.arange(len(docs[i])) for i in mb])
            # Rows whose next token is in the same document.
            rows = torch.cat([torch.arange(len(docs[i]) - 1) + sum(len(docs[j]) for j in mb[:n])
                              for n, i in enumerate(mb)])
            out = model(input_ids=tokens[None], position_ids=positions[None], use_cache=False,
                        **(dict(output_router_logits=True) if moe else {}))
            ce = torch.nn.functional.cross_entropy(out.logits[0, rows].float(), tokens[rows + 1], reduction="sum")
            share = len(tokens) / global_tokens
            loss = ce / global_targets
            if moe:
                loss = loss + config.router_aux_loss_coef * share * out.aux_loss
                aux_sum += out.aux_loss.item() * share
            loss.backward()
            loss_sum += ce.item()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), SETTINGS["clip"]).item()
        lr = learning_rate(index, SETTINGS["lr"], SETTINGS["min_lr_ratio"], SETTINGS["warmup"], STEPS)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        metrics.append(dict(loss=loss_sum / global_targets, aux_loss=aux_sum, grad_norm=grad_norm, lr=lr))
    return metrics, model


def compare_steps(ours, reference):
    failures = []
    print(f"{'step':>4} {'loss':>10} {'ref':>10} {'rel':>8} {'aux rel':>8} {'gnorm':>9} {'ref':>9} {'rel':>8} "
          f"{'lr':>9} {'lr rel':>8}")
    for step, (a, b) in enumerate(zip(ours, reference), start=1):
        rel = {}
        for key in ("loss", "aux_loss", "grad_norm", "lr"):
            if a.get(key) is None:
                fail(f"metrics.jsonl step {step} has no {key}")
            # A dense model's aux loss is zero on both sides: its error is absolute.
            rel[key] = abs(a[key] - b[key]) / (abs(b[key]) or 1.0)
            if not rel[key] <= BOUNDS[key]:
                failures.append(f"step {step} {key}: {a[key]:.8g} vs reference {b[key]:.8g} "
                                f"(relative {rel[key]:.2e} > {BOUNDS[key]:.0e})")
        print(f"{step:>4} {a['loss']:>10.6f} {b['loss']:>10.6f} {rel['loss']:>8.1e} {rel['aux_loss']:>8.1e} "
              f"{a['grad_norm']:>9.5f} {b['grad_norm']:>9.5f} {rel['grad_norm']:>8.1e} {a['lr']:>9.2e} "
              f"{rel['lr']:>8.1e}")
    clipped = sum(b["grad_norm"] > SETTINGS["clip"] for b in reference)
    if clipped < STEPS:
        failures.append(f"clipping acted on {clipped} of {STEPS} reference steps: lower SETTINGS['clip'] "
                        "so that the test covers it")
    return failures


def compare_weights(exported, hf_init, reference):
    """Each tensor's distance to the reference, relative to how far the reference moved it;
    transformers loads both folders, so both are in its layout whatever the files' layout."""
    trained = transformers.AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)
    initial = transformers.AutoModelForCausalLM.from_pretrained(hf_init, dtype=torch.float32)
    ours = dict(trained.named_parameters())
    start = dict(initial.named_parameters())
    failures, worst = [], (0.0, "")
    for name, ref in reference.named_parameters():
        if name not in ours:
            failures.append(f"{exported} lacks {name}")
            continue
        # k_proj's bias adds q . b to every score of a query alike, which softmax cancels: its
        # gradient is zero but for rounding, so what the steps moved it is rounding noise that
        # Adam scales up. Its error is taken relative to the tensor itself instead.
        moved = (ref if name.endswith("k_proj.bias") else ref - start[name]).norm().item()
        error = (ours[name] - ref).norm().item() / moved
        worst = max(worst, (error, name))
        if not error <= BOUNDS["weights"]:
            failures.append(f"{name}: ||topotrain - reference|| = {error:.2e} x ||reference - initial|| "
                            f"(> {BOUNDS['weights']:.0e})")
    print(f"weights: worst tensor {worst[1]} at {worst[0]:.2e} x its change (bound {BOUNDS['weights']:.0e})")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.environ.get("TOPOTRAIN_BIN"), help="topotrain's bin/ (TOPOTRAIN_BIN)")
    parser.add_argument("--keep", help="work in this new or empty folder and keep it (default: a temporary one)")
    parser.add_argument("--family", choices=sorted(FAMILIES), default="qwen3_moe", help="the model's family")
    args = parser.parse_args()
    if not args.bin or not os.path.isfile(os.path.join(args.bin, "moe_train")):
        fail(f"no moe_train in --bin / TOPOTRAIN_BIN ('{args.bin}'): point it at the build's bin/")
    if shutil.which("mpirun") is None:
        fail("mpirun is not on PATH (source launch/env.sh)")
    torch.set_num_threads(2)
    work = args.keep or tempfile.mkdtemp(prefix="hf_train_trajectory.")
    if args.keep:
        if os.path.isdir(work) and os.listdir(work):
            fail(f"--keep {work}: the folder is not empty; name a new one")
        os.makedirs(work, exist_ok=True)
    try:
        texts = documents()
        docs = [list(t.encode("ascii")) + [EOS] for t in texts]
        hf_init = os.path.join(work, "hf-init")
        save_initial_model(hf_init, args.family)
        run_dir, exported = train_topotrain(args.bin, work, hf_init, texts)
        ours = read_metrics(run_dir)
        steps = read_micro_batches(run_dir, docs)
        reference, model = train_reference(hf_init, docs, steps)
        failures = compare_steps(ours, reference) + compare_weights(exported, hf_init, model)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if failures:
        shown = failures[:12] + ([f"... and {len(failures) - 12} more"] if len(failures) > 12 else [])
        fail("moe_train's trajectory left the reference's:\n  " + "\n  ".join(shown))
    print(f"PASS: {args.family}: {STEPS} steps on {RANKS} ranks x grad_accum {GRAD_ACCUM} match transformers + "
          "torch.optim.AdamW")


if __name__ == "__main__":
    main()
