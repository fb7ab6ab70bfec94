#!/usr/bin/python3
"""Renders conversations with a chat template as Hugging Face transformers does for
training data: apply_chat_template(messages, tools=tools, tokenize=False), no generation
prompt. The environment is the one transformers compiles chat templates in: a sandboxed
(immutable) Jinja2 environment with trim_blocks and lstrip_blocks, the loopcontrols
extension, a raise_exception global and a tojson filter that is json.dumps with
ensure_ascii=False.

usage: render_chat_template.py TEMPLATE_SOURCE CONVERSATIONS.jsonl
TEMPLATE_SOURCE: a tokenizer_config.json (its "chat_template") or a .jinja file.
Prints a JSON list with one rendered string per line of CONVERSATIONS.jsonl.
Exits 77 when Jinja2 is not installed (the calling test then skips).
"""
import json
import sys

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(77)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    source, conversations = sys.argv[1], sys.argv[2]
    with open(source, encoding="utf-8") as f:
        text = f.read() if source.endswith(".jinja") else json.load(f)["chat_template"]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(text)
    rendered = []
    with open(conversations, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            conversation = json.loads(line)
            rendered.append(template.render(messages=conversation["messages"], tools=conversation.get("tools"),
                                            documents=None, add_generation_prompt=False))
    json.dump(rendered, sys.stdout, ensure_ascii=False)


main()
