"""A folder topotrain-export wrote, as a transformers user meets it (tests/hf/export_generate.sh):
AutoTokenizer and AutoModelForCausalLM from the folder alone, nothing of topotrain's.

    export_generate.py check EXPORT_DIR TOKENIZER_DIR [--continuations C.jsonl --max-new-tokens N]
                             [--speculation S.json] [--untrained]
    export_generate.py prompts EXPORT_DIR CHATS.jsonl N PROMPTS.jsonl

check: one line per check, exit status 1 when one fails:
  - the tokenizer loads as quietly as from TOKENIZER_DIR, the folder the training data was
    prepared with (no warning transformers' loggers or Python's warnings give for the export and
    not for its source), and encodes a chat text to the same ids;
  - generation_config.json's eos_token_id holds the tokenizer's eos token (<|im_end|> for a chat
    tokenizer), so that generate stops at the end of a turn;
  - with a chat template in the folder (and without --untrained, for a model trained too little to
    end a turn): generate on a prompt made by it stops at that eos;
  - --continuations (greedy_continuation's JSON lines, up to --max-new-tokens each): greedy
    generate with the same limit on each prompt equals topotrain's response token for token,
    fp32 on both sides (the bound: exactly equal), so it stops where topotrain stopped;
  - --speculation (topotrain-speculate --json on the same prompts): its stop tokens are the ids
    generate stops at, its greedy responses hold as many tokens as generate's, and they are lossless.
prompts writes the first user turn of each of the first N chats of CHATS.jsonl
({"messages": [...]}, data/chat_demo.py) as topotrain-speculate's {"tokens": [ids]} lines: the
tokenizer's chat template with the generation prompt, or ChatML where the folder has none.
"""
import argparse
import contextlib
import json
import logging
import sys
import warnings

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

CHAT_TEXT = "<|im_start|>user\nWhat is 12 plus 30?<|im_end|>\n<|im_start|>assistant\n"


@contextlib.contextmanager
def captured_warnings(records):
    """Collects what transformers' loggers and Python's warnings say at WARNING and above."""
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            logger.removeHandler(handler)
            records.extend(str(w.message) for w in caught)


def load_tokenizer(folder):
    said = []
    with captured_warnings(said):
        tokenizer = AutoTokenizer.from_pretrained(folder)
    return tokenizer, said


def chat_prompt(tokenizer, question):
    """The ids a user sends: the folder's chat template with the generation prompt, else ChatML."""
    messages = [{"role": "user", "content": question}]
    if tokenizer.chat_template:
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                  return_dict=True)["input_ids"])
    return tokenizer.encode(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n",
                            add_special_tokens=False)


def write_prompts(folder, chats, count, out):
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with open(chats) as f, open(out, "w") as o:
        for line in list(f)[:count]:
            question = json.loads(line)["messages"][0]["content"]
            o.write(json.dumps({"tokens": chat_prompt(tokenizer, question)}) + "\n")
    print(f"{count} chat prompts of {chats} -> {out}")


def generate(model, ids, max_new_tokens):
    ids = torch.tensor([ids], device=model.device)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False)
    return out[0, ids.shape[1]:].tolist()


def check(folder, source, continuations, max_new_tokens, speculation, untrained):
    failed = []
    # The source first: a warning transformers gives once then counts for it, not the export.
    source_tokenizer, source_said = load_tokenizer(source)
    tokenizer, said = load_tokenizer(folder)
    extra = [w for w in said if w not in source_said]
    print(f"tokenizer: {type(tokenizer).__name__} of {len(tokenizer)} tokens; warnings loading the export "
          f"{len(said)}, its source {source}: {len(source_said)}")
    for warning in extra:
        print(f"  the export only: {warning[:300]}")
    if extra:
        failed.append(f"the export's tokenizer loads with {len(extra)} warning(s) its source does not give")
    if tokenizer.encode(CHAT_TEXT) != source_tokenizer.encode(CHAT_TEXT):
        failed.append(f"the export's tokenizer encodes {CHAT_TEXT!r} otherwise than its source")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
    eos = model.generation_config.eos_token_id
    eos = [] if eos is None else eos if isinstance(eos, list) else [eos]
    print(f"{type(model).__name__} on {device} (transformers {transformers.__version__}); generation_config eos "
          f"{eos}, pad {model.generation_config.pad_token_id}; tokenizer eos {tokenizer.eos_token!r} "
          f"({tokenizer.eos_token_id})")
    if tokenizer.eos_token_id is None or tokenizer.eos_token_id not in eos:
        failed.append(f"generation_config.json's eos_token_id {eos} lacks the tokenizer's eos "
                      f"{tokenizer.eos_token!r} ({tokenizer.eos_token_id})")

    if untrained:
        print("an untrained model: the chat-template prompt is not tried")
    elif tokenizer.chat_template:
        question = "What is 12 plus 30?"
        new = generate(model, chat_prompt(tokenizer, question), 64)
        stopped = bool(new) and new[-1] in eos
        print(f"chat template prompt {question!r}: {len(new)} tokens, "
              f"{'stopped at ' + tokenizer.decode(new[-1:]) if stopped else 'DID NOT STOP'}: {tokenizer.decode(new)!r}")
        if not stopped:
            failed.append("generate on a chat-template prompt did not stop at an eos")
    else:
        print("no chat template in the folder: the chat-template prompt is not tried")

    generated_tokens = 0
    if continuations:
        records = [json.loads(line) for line in open(continuations)]
        equal = 0
        for i, record in enumerate(records):
            mine = generate(model, record["prompt"], max_new_tokens)
            generated_tokens += len(mine)
            if mine == record["response"]:
                equal += 1
                continue
            if i - equal >= 3:
                continue  # the first three differences tell enough
            first = next((k for k, (a, b) in enumerate(zip(mine, record["response"])) if a != b),
                         min(len(mine), len(record["response"])))
            print(f"  prompt {i}: differs from token {first} (transformers {len(mine)} tokens, topotrain "
                  f"{len(record['response'])}): transformers {tokenizer.decode(mine)[:160]!r}, "
                  f"topotrain {tokenizer.decode(record['response'])[:160]!r}")
        stops = sum(r["stopped"] for r in records)
        print(f"greedy continuations: {equal} of {len(records)} equal topotrain's token for token "
              f"({stops} of them stopped at an end token within the limit)")
        if equal != len(records):
            failed.append(f"{len(records) - equal} greedy continuations differ")
        if stops == 0:
            failed.append("no continuation stopped, so none shows where decoding stops")

    if speculation:
        report = json.load(open(speculation))
        stops, greedy = report["setup"]["stop_tokens"], report["greedy"]["tokens"]
        print(f"topotrain-speculate: stop tokens {stops}, {greedy} greedy tokens (generate: {generated_tokens}), "
              f"{report['lossless']['mismatched_prompts']} speculative responses differ from greedy")
        if sorted(set(eos)) != sorted(stops):
            failed.append(f"topotrain-speculate stops at {stops}, generate at {eos}")
        if continuations and greedy != generated_tokens:
            failed.append(f"topotrain-speculate's greedy responses hold {greedy} tokens, generate's {generated_tokens}")
        if report["lossless"]["mismatched_prompts"]:
            failed.append("topotrain-speculate's speculative responses differ from its greedy ones (fp32)")

    print("PASS" if not failed else "FAIL: " + "; ".join(failed))
    return 0 if not failed else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    checks = commands.add_parser("check", help="the checks above")
    checks.add_argument("export_dir")
    checks.add_argument("tokenizer_dir", help="the tokenizer folder the training data was prepared with")
    checks.add_argument("--continuations", help="greedy_continuation's output on the prompts")
    checks.add_argument("--max-new-tokens", type=int, help="greedy_continuation's MAX_NEW")
    checks.add_argument("--speculation", help="topotrain-speculate --json on the same prompts")
    checks.add_argument("--untrained", action="store_true", help="a model trained too little to end a turn")
    prompts = commands.add_parser("prompts", help="chat prompts as topotrain-speculate's JSON lines")
    prompts.add_argument("export_dir")
    prompts.add_argument("chats")
    prompts.add_argument("count", type=int)
    prompts.add_argument("out")
    args = parser.parse_args()
    if args.command == "check" and args.continuations and not args.max_new_tokens:
        parser.error("--continuations needs --max-new-tokens, the MAX_NEW greedy_continuation decoded with")
    if args.command == "prompts":
        write_prompts(args.export_dir, args.chats, args.count, args.out)
        return 0
    return check(args.export_dir, args.tokenizer_dir, args.continuations, args.max_new_tokens, args.speculation,
                 args.untrained)


if __name__ == "__main__":
    sys.exit(main())
