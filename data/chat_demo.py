#!/usr/bin/env python3
"""Writes the DFlash demo's chat corpus as JSONL ({"messages": [...]} per line) to stdout.

Each conversation is one to three turns of a user asking for a sum, difference or product of
two numbers in one of a few phrasings, and the assistant restating it with the result. A tiny
target learns it within the demo's minutes, and what follows an assistant token depends on the
conversation (the numbers asked about, the phrase being spelled), so a drafter that reads the
target's hidden states has something to learn beyond the token frequencies, which a drafter
on plain license text with a target of that size does not.

    chat_demo.py SEED CONVERSATIONS
"""
import json
import random
import sys

OPERATIONS = [("plus", lambda a, b: a + b), ("minus", lambda a, b: a - b), ("times", lambda a, b: a * b)]
QUESTIONS = ["What is {a} {op} {b}?", "Please compute {a} {op} {b}.", "How much is {a} {op} {b}?"]


def conversation(rng):
    messages = []
    for _ in range(rng.randint(1, 3)):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        op, result = rng.choice(OPERATIONS)
        messages.append({"role": "user", "content": rng.choice(QUESTIONS).format(a=a, op=op, b=b)})
        messages.append({"role": "assistant", "content": f"{a} {op} {b} is {result(a, b)}."})
    return {"messages": messages}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: chat_demo.py SEED CONVERSATIONS")
    rng = random.Random(int(sys.argv[1]))
    for _ in range(int(sys.argv[2])):
        print(json.dumps(conversation(rng)))


if __name__ == "__main__":
    main()
