"""Tokenizer folders (tokenizer.json, tokenizer_config.json with the chat template) of the Llama 3.1
and Qwen2.5 kinds, made here with Hugging Face tokenizers' own API because the published files
cannot be downloaded where the tests run.

    family_tokenizers.py FAMILY OUT_DIR      (FAMILY: llama3 or qwen2_5)

Each folder has the published tokenizer's model and pre-tokenizer settings, and its chat
template as published in the model's tokenizer_config.json; only the vocabulary and merges are
smaller (a byte-level BPE trained here with tokenizers.trainers.BpeTrainer on the test corpus,
tests/hf/text_corpus.py, with the whole byte alphabet):
  * llama3 (Meta-Llama-3.1-8B-Instruct): BPE with ignore_merges, no normalizer, a Sequence of
    Split(Llama 3's regex, Isolated) and ByteLevel(add_prefix_space=False, use_regex=False), a
    ByteLevel decoder, the post-processor that puts <|begin_of_text|> before every sequence
    (ByteLevel, then TemplateProcessing), and Llama 3.1's 256 special tokens (<|begin_of_text|>,
    <|end_of_text|>, <|start_header_id|>, <|end_header_id|>, <|eot_id|>, <|eom_id|>,
    <|python_tag|>, <|finetune_right_pad_id|> and the reserved ones) after the vocabulary;
    bos_token <|begin_of_text|>, eos_token <|eot_id|>.
  * qwen2_5 (Qwen2.5-7B-Instruct): BPE, NFC normalizer, a Sequence of Split(Qwen2's regex,
    Isolated) and ByteLevel(add_prefix_space=False, use_regex=False), ByteLevel post-processor
    (no token added) and decoder, Qwen2.5's 22 added tokens (<|endoftext|>, <|im_start|>,
    <|im_end|>, the vision and FIM tokens, <tool_call> and </tool_call>); no bos_token,
    eos_token <|im_end|>.
Used by tokenizer_corpus.py and chat_template.py (--family), which compare topotrain with
tokenizers and transformers on these folders.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from text_corpus import EDGE_CASES, SAMPLES  # noqa: E402

FAMILIES = ("llama3", "qwen2_5")

# The pre-tokenizer patterns of the published tokenizer.json files (Split, behavior Isolated).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Meta-Llama-3.1-8B-Instruct's chat_template, as published in its tokenizer_config.json.
LLAMA31_CHAT_TEMPLATE = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# Qwen2.5-7B-Instruct's chat_template, as published in its tokenizer_config.json.
QWEN25_CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""


def llama31_special_tokens():
    """Llama 3.1's 256 special tokens in id order (128000 + i in the published file)."""
    named = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
             "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>",
             "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    return named + [f"<|reserved_special_token_{i}|>" for i in range(3, 3 + 256 - len(named))]


QWEN25_ADDED_TOKENS = [  # (content, special) in id order (151643 + i in the published file)
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False)]


def training_text():
    """What the vocabulary is learned from: the corpus samples and edge cases, and the license
    texts make_corpus mixes in."""
    texts = SAMPLES + [text for _, text in EDGE_CASES if len(text) < 10_000]
    for name in ("Apache-2.0", "GPL-3", "LGPL-2.1", "MPL-2.0", "GFDL-1.3"):
        path = os.path.join("/usr/share/common-licenses", name)
        if os.path.exists(path):
            texts.append(open(path, encoding="utf-8").read())
    return texts


def with_whole_pieces(tokenizer, texts, count=1000):
    """The tokenizer with the `count` most frequent pre-tokenized pieces of `texts` that its
    vocabulary lacks added to the vocabulary, and no merge that makes them: only ignore_merges
    gives their single ids, as in Llama 3's vocabulary, where some tokens are not what the
    merges build."""
    from collections import Counter
    from tokenizers import Tokenizer
    spec = json.loads(tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    pieces = Counter(piece for text in texts for piece, _ in tokenizer.pre_tokenizer.pre_tokenize_str(text))
    for piece, _ in pieces.most_common():
        if count == 0:
            break
        if piece not in vocab and len(piece) > 1:
            vocab[piece] = len(vocab)
            count -= 1
    return Tokenizer.from_str(json.dumps(spec))


def build(family, vocab_size=4000):
    """(tokenizers.Tokenizer, tokenizer_config dict) of the family."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers.trainers import BpeTrainer
    if family not in FAMILIES:
        raise SystemExit(f"unknown family {family!r}: one of {', '.join(FAMILIES)}")
    llama = family == "llama3"
    tokenizer = Tokenizer(models.BPE(ignore_merges=llama, byte_fallback=False, fuse_unk=False))
    if not llama:
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN if llama else QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=llama, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    trainer = BpeTrainer(vocab_size=vocab_size, min_frequency=1, show_progress=False,
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(training_text(), trainer=trainer)
    if llama:
        tokenizer = with_whole_pieces(tokenizer, training_text())
        specials = llama31_special_tokens()
        tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        bos = "<|begin_of_text|>"
        tokenizer.post_processor = processors.Sequence([
            processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
            processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                          special_tokens=[(bos, tokenizer.token_to_id(bos))])])
        config = {"bos_token": bos, "eos_token": "<|eot_id|>", "clean_up_tokenization_spaces": True,
                  "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 131072,
                  "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": LLAMA31_CHAT_TEMPLATE}
    else:
        tokenizer.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in QWEN25_ADDED_TOKENS])
        tokenizer.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
        config = {"add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>",
                  "pad_token": "<|endoftext|>", "errors": "replace", "clean_up_tokenization_spaces": False,
                  "model_max_length": 131072, "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
                  "unk_token": None, "chat_template": QWEN25_CHAT_TEMPLATE}
    return tokenizer, config


def write(family, folder):
    """Writes the family's tokenizer.json and tokenizer_config.json into `folder` (created)."""
    tokenizer, config = build(family)
    os.makedirs(folder, exist_ok=True)
    tokenizer.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as out:
        json.dump(config, out, ensure_ascii=False, indent=2)
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    write(sys.argv[1], sys.argv[2])
