#!/usr/bin/env python3
"""Greedy DFlash speculative decoding written on transformers, against topotrain-speculate's.

    dflash_speculate.py WORK [--prompts N] [--max-new-tokens N] [--stop-token ID]

WORK is what tests/hf/dflash_pair.sh made: target-hf/ and drafter-hf/ (topotrain-export's
folders) and held-out.jsonl (the demo's chats). The prompts are the held-out chats' assistant
turns in ChatML bytes (a byte is its id; <|im_start|> 257, <|im_end|> 258): the turns before
one and "<|im_start|>assistant\\n", the first N of them. They go to topotrain-speculate
($TOPOTRAIN_BIN) as a .jsonl of {"tokens": [...]}, on CPU in fp32, with --stop-token and
--responses (each prompt's ids, both responses and every verification's acceptance length).

The reference, from the exported folders alone, fp32, without caches:
  greedy       transformers' generate (AutoModelForCausalLM, do_sample=False), the stop tokens
               as its eos_token_id
  speculative  DFlash's greedy verification: `next` is the target's argmax after the prompt;
               each step the drafter (dflash_export_parity.Drafter: the draft forward written
               on transformers' Qwen3 modules) drafts d1..d_{B-1} for the block
               [next, mask x (B-1)] at next's position, its context the target's taps of every
               position before; the target runs the sequence with d1..d_{B-1} appended and
               keeps d1..d_a, the longest prefix equal to its own argmax after each block
               position, then its argmax after d_a (the next `next`). The acceptance length of
               the verification is a + 1.
Both stop after --max-new-tokens tokens or at a stop token (kept; a block is cut there). The
stop tokens are --stop-token's and the target's eos ids (config and generation config).

Bound: equality, per prompt. The tool's prompt ids are those written; its greedy and speculative
responses equal the reference's token for token; its acceptance lengths equal the reference's,
verification by verification. Both sides compute in fp32, so only a near tie between the
target's two best tokens could round either way: the smallest gap between them over the
reference's greedy choices is printed, to tell such a tie from a bug. Exit status 0 equal,
1 a difference, 2 bad input or a tool that failed.
"""
import argparse
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dflash_export_parity import load_models, target_forward  # noqa: E402

IM_START, IM_END = 257, 258


def fail(message):
    print(f"dflash_speculate.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def chatml_prompts(path, count):
    """The first `count` assistant turns of the chats in `path`, each with the turns before it."""
    prompts = []
    with open(path) as f:
        for line in f:
            tokens = []
            for message in json.loads(line)["messages"]:
                if message["role"] == "assistant":
                    prompts.append(tokens + [IM_START] + list(b"assistant\n"))
                    if len(prompts) == count:
                        return prompts
                tokens += [IM_START] + list(f"{message['role']}\n{message['content']}".encode()) + [IM_END, ord("\n")]
    fail(f"{path} holds {len(prompts)} assistant turns, fewer than --prompts {count}")


def run_tool(work, prompts, max_new_tokens, stop_token):
    """topotrain-speculate's responses.jsonl lines, one per prompt."""
    bin_dir = os.environ.get("TOPOTRAIN_BIN")
    if not bin_dir:
        fail("TOPOTRAIN_BIN must name the build's bin folder")
    with open(os.path.join(work, "prompts.jsonl"), "w") as f:
        for prompt in prompts:
            f.write(json.dumps({"tokens": prompt}) + "\n")
    responses = os.path.join(work, "responses.jsonl")
    command = [os.path.join(bin_dir, "topotrain-speculate"), "--target", os.path.join(work, "target-hf"),
               "--drafter", os.path.join(work, "drafter-hf"), "--prompts", os.path.join(work, "prompts.jsonl"),
               "--num-prompts", str(len(prompts)), "--max-new-tokens", str(max_new_tokens), "--device", "cpu",
               "--dtype", "fp32", "--stop-token", str(stop_token), "--responses", responses]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"{' '.join(command)}\nexited {done.returncode}:\n{done.stdout}{done.stderr}")
    print(done.stdout)
    with open(responses) as f:
        return [json.loads(line) for line in f]


def greedy(target, prompt, max_new_tokens, stops):
    """transformers' greedy response and the smallest gap between the top two logits of a step."""
    out = target.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                          do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=sorted(stops),
                          pad_token_id=min(stops), output_scores=True, return_dict_in_generate=True)
    gap = min((lambda top: (top[0] - top[1]).item())(scores[0].topk(2).values) for scores in out.scores)
    return out.sequences[0, len(prompt):].tolist(), gap


def speculative(target, drafter, prompt, max_new_tokens, stops):
    """The speculative response and the acceptance length of every verification."""
    embed, lm_head = target.get_input_embeddings().weight, target.get_output_embeddings().weight
    block_size = drafter.block_size
    response, lengths = [], []

    def keep(token):  # whether decoding goes on
        response.append(token)
        return len(response) < max_new_tokens and token not in stops

    logits, _ = target_forward(target, drafter, prompt)
    next_token = logits[-1].argmax().item()
    while keep(next_token):
        sequence = prompt + response  # ends with next_token
        anchor = len(sequence) - 1
        _, taps = target_forward(target, drafter, sequence)
        drafts = drafter(taps, sequence, [anchor], embed, lm_head)[0, 1:].argmax(-1).tolist()
        logits, _ = target_forward(target, drafter, sequence + drafts)
        posterior = logits[anchor:].argmax(-1).tolist()  # the target's choice after each block position
        accepted = 0
        while accepted < block_size - 1 and drafts[accepted] == posterior[accepted]:
            accepted += 1
        lengths.append(accepted + 1)
        if not all(keep(token) for token in drafts[:accepted]):
            break
        next_token = posterior[accepted]
    return response, lengths


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--stop-token", type=int, default=IM_END)
    args = parser.parse_args()
    torch.set_num_threads(1)

    prompts = chatml_prompts(os.path.join(args.work, "held-out.jsonl"), args.prompts)
    tool = run_tool(args.work, prompts, args.max_new_tokens, args.stop_token)
    target, drafter = load_models(os.path.join(args.work, "target-hf"), os.path.join(args.work, "drafter-hf"),
                                  torch.float32, "cpu")
    stops = {args.stop_token}
    for source in (target.config, target.generation_config):
        eos = getattr(source, "eos_token_id", None)
        stops |= set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    if len(tool) != len(prompts):
        print(f"FAIL: topotrain-speculate wrote {len(tool)} responses for {len(prompts)} prompts")
        return 1

    failures, histogram, smallest_gap, tokens = 0, [0] * drafter.block_size, float("inf"), 0
    with torch.no_grad():
        for p, (prompt, ours) in enumerate(zip(prompts, tool)):
            reference_greedy, gap = greedy(target, prompt, args.max_new_tokens, stops)
            reference_speculative, lengths = speculative(target, drafter, prompt, args.max_new_tokens, stops)
            smallest_gap, tokens = min(smallest_gap, gap), tokens + len(reference_greedy)
            for length in lengths:
                histogram[length - 1] += 1
            checks = [("prompt ids", ours["prompt"], prompt),
                      ("greedy response", ours["greedy"], reference_greedy),
                      ("speculative response", ours["speculative"], reference_speculative),
                      ("acceptance lengths", ours["acceptance_lengths"], lengths)]
            for name, got, want in checks:
                if got != want:
                    failures += 1
                    print(f"prompt {p}: {name} differ\n  topotrain-speculate {got}\n  reference           {want}")
    verifications = sum(histogram)
    tau = sum((i + 1) * n for i, n in enumerate(histogram)) / max(verifications, 1)
    print(f"reference: {len(prompts)} prompts, {tokens} greedy tokens, stop tokens {sorted(stops)}; "
          f"{verifications} verifications, tau {tau:.3f}, acceptance lengths 1..{drafter.block_size}: {histogram}; "
          f"smallest gap between the target's top two logits {smallest_gap:.3e}")
    print("bound: equal prompt ids, responses and acceptance lengths per prompt and verification")
    print("PASS" if failures == 0 else f"FAIL: {failures} differences")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
