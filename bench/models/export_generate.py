"""An exported chat model as a transformers user meets it (bench/models/export_check.sh):
AutoTokenizer and AutoModelForCausalLM from the folder alone, generate on a chat prompt made
by the tokenizer's own chat template, which must stop at the tokenizer's end of turn
(<|im_end|>) through the folder's generation_config.json; then greedy generate on the
prompts greedy_continuation decoded with topotrain (CONTINUATIONS.jsonl), whose responses it
must equal token for token (fp32 on both sides). Prints one line per check and exits 1 on a
failure.

    python3 export_generate.py EXPORT_DIR CONTINUATIONS.jsonl [QUESTION]
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main(folder, continuations, question):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    eos = model.generation_config.eos_token_id
    eos = eos if isinstance(eos, list) else [eos]
    failed = []
    print(f"{folder}: {type(tokenizer).__name__} of {len(tokenizer)} tokens, generation_config eos {eos}, "
          f"pad {model.generation_config.pad_token_id}; {type(model).__name__} on {device}")
    if end_of_turn not in eos:
        failed.append(f"generation_config.json's eos_token_id {eos} lacks <|im_end|> ({end_of_turn})")

    # A chat prompt as a user writes one, through the exported tokenizer's chat template.
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**{k: v.to(device) for k, v in prompt.items()}, max_new_tokens=64, do_sample=False)
    new = out[0, prompt["input_ids"].shape[1]:].tolist()
    stopped = bool(new) and new[-1] == end_of_turn
    print(f"chat prompt {question!r}: {len(new)} tokens, {'stopped at <|im_end|>' if stopped else 'DID NOT STOP'}: "
          f"{tokenizer.decode(new)!r}")
    if not stopped:
        failed.append("generate on a chat prompt did not stop at <|im_end|>")

    # topotrain's greedy continuations, token for token.
    records = [json.loads(line) for line in open(continuations)]
    equal = 0
    for i, record in enumerate(records):
        ids = torch.tensor([record["prompt"]], device=device)
        max_new = max(len(record["response"]), 1) if record["stopped"] else len(record["response"])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                 do_sample=False)
        mine = out[0, ids.shape[1]:].tolist()
        if mine == record["response"]:
            equal += 1
        else:
            first = next((k for k, (a, b) in enumerate(zip(mine, record["response"])) if a != b),
                         min(len(mine), len(record["response"])))
            print(f"  prompt {i}: differs from token {first}: transformers {tokenizer.decode(mine)!r}, "
                  f"topotrain {tokenizer.decode(record['response'])!r}")
    stops = sum(r["stopped"] for r in records)
    print(f"greedy continuations: {equal} of {len(records)} equal topotrain's token for token "
          f"({stops} of them stopped at an end token within the limit)")
    if equal != len(records):
        failed.append(f"{len(records) - equal} greedy continuations differ")
    print("PASS" if not failed else "FAIL: " + "; ".join(failed))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "What is 12 plus 30?"))
