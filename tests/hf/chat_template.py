"""topotrain's rendering of a chat template against transformers' apply_chat_template, over
conversations with system, user, assistant and tool turns, reasoning, tool calls and non-ASCII
content: Qwen3's template with the real Qwen3 tokenizer, or Llama 3.1's or Qwen2.5's with a
tokenizer folder made by family_tokenizers.py.

    chat_template.py [TOKENIZER_DIR]   (default: ../shared/data/qwen3-tokenizer beside the repository)
    chat_template.py --family llama3|qwen2_5

The Llama 3.1 and Qwen2.5 files cannot be downloaded where this runs: --family builds their
tokenizers with HF tokenizers' own API and the published model and pre-tokenizer settings, and
writes into tokenizer_config.json the chat template as published for Meta-Llama-3.1-8B-Instruct
and Qwen2.5-7B-Instruct (family_tokenizers.py). Each family gets the conversations its template
renders (no reasoning_content but for Qwen3; Llama: one tool call a message and no content
beside it, tool responses as "tool" or "ipython" messages).

topotrain's side: topotrain-prepare (TOPOTRAIN_BIN) with the folder's tokenizer.json renders
each conversation ({"messages", "tools"} JSONL lines) with the chat_template of the folder's
tokenizer_config.json and writes its ids and loss mask, read back with h5py. The reference:
AutoTokenizer.from_pretrained(folder).apply_chat_template(messages, tools=tools, ...). Checked,
each exactly:
  * training rendering: the ids equal apply_chat_template(tokenize=True)'s (no generation
    prompt; for Llama one <|begin_of_text|>, the template's), and HF's decode of them equals
    its tokenize=False text, normalised as the tokenizer does (NFC for Qwen);
  * generation prompts, as topotrain-speculate takes them from a dataset (the tokens before
    each run of loss mask 1): those before assistant message i's run equal
    apply_chat_template(messages[:i], add_generation_prompt=True)'s ids (enable_thinking at its
    default); there is one run per assistant turn and each ends with the end of turn
    (<|im_end|>; Llama <|eot_id|>);
  * Qwen3 thinking off: where the last turn is an answer without reasoning or tool calls, the
    ids are those of apply_chat_template(messages[:-1], add_generation_prompt=True,
    enable_thinking=False) followed by the answer and "<|im_end|>\\n": the template's
    non-thinking mode;
  * Llama refusals: where the template raises (two tool calls in a message, tools without a
    user message) transformers raises too and topotrain-prepare exits 2 quoting the
    template's message; content beside a tool call (which the template drops) and a template
    that dates the system turn with strftime_now (Llama 3.2's way) are refused by name.
Prints the first difference of each conversation with its code points; exit 1 on any, 77
(skipped) without the Qwen3 tokenizer (--family needs no file).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_tokenizers  # noqa: E402
from text_corpus import first_difference, first_text_difference, prepare_binary, read_documents  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "城市 / city"},
                                                    "unit": {"type": "string", "enum": ["°C", "°F"]}},
                   "required": ["city"]}}}
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search", "description": "Web search", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer"}}}}}


def user(text):
    return {"role": "user", "content": text}


def assistant(text, **fields):
    return {"role": "assistant", "content": text, **fields}


def call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS = [
    ("one turn", [user("What is 2+2?"), assistant("4")], None),
    ("system prompt", [{"role": "system", "content": "You are terse."}, user("Capital of France?"),
                       assistant("Paris.")], None),
    ("multi-turn", [{"role": "system", "content": "Answer in one line."}, user("Hi!"), assistant("Hello."),
                    user("Name a prime."), assistant("7"), user("Another?"), assistant("11, and 13 too.")], None),
    ("reasoning on the last turn", [user("Is 91 prime?"),
                                    assistant("No: 91 = 7 × 13.", reasoning_content="Try 7: 7 × 13 = 91.")], None),
    ("reasoning before the last query is dropped",
     [user("Is 9 prime?"), assistant("No.", reasoning_content="9 = 3 × 3."), user("And 11?"),
      assistant("Yes.", reasoning_content="\nNo divisor up to 3.\n")], None),
    ("think block inside content",
     [user("Why is the sky blue?"), assistant("<think>\nRayleigh scattering.\n</think>\n\nBlue scatters more.")],
     None),
    ("empty reasoning and leading newlines", [user("Say hi"), assistant("\n\nhi", reasoning_content="")], None),
    ("non-ASCII content",
     [{"role": "system", "content": "Réponds en français, 中文 ou العربية."},
      user("東京の天気は？ 🌧️ Ça va? Привет! שלום"),
      assistant("Il pleut à Tokyo 🌧️ — 东京在下雨。 المطر يهطل."), user("Ｆｕｌｌｗｉｄｔｈ and cafe\u0301 (NFD)?"),
      assistant("👩‍👩‍👧‍👦 fine, cafe\u0301 noted.")], None),
    ("tool calls and grouped responses",
     [{"role": "system", "content": "Use tools when useful."}, user("Weather in Paris and 東京?"),
      assistant("", tool_calls=[call("get_weather", {"city": "Paris", "unit": "°C"}),
                                call("get_weather", {"city": "東京"})]),
      {"role": "tool", "name": "get_weather", "content": "{\"temp\": 18}"},
      {"role": "tool", "name": "get_weather", "content": "{\"temp\": 22, \"sky\": \"晴れ\"}"},
      assistant("Paris 18 °C, 東京 22 °C.")], [WEATHER_TOOL]),
    ("tool call with content, string arguments and reasoning",
     [user("Search for topotrain"),
      assistant("Let me search.", reasoning_content="A web search answers this.",
                tool_calls=[call("search", "{\"query\": \"topotrain\", \"limit\": 3}")]),
      {"role": "tool", "content": "3 results"}, assistant("Found 3 results.")], [WEATHER_TOOL, SEARCH_TOOL]),
    ("tools without a system message", [user("Weather?"), assistant("Which city?")], [WEATHER_TOOL]),
    ("user turn that wraps a tool response",
     [user("Look it up"), assistant("", tool_calls=[call("search", {"query": "x"})]),
      user("<tool_response>\nnothing\n</tool_response>"), assistant("Nothing found.", reasoning_content="Empty.")],
     [SEARCH_TOOL]),
    ("system message mid-conversation", [user("a"), assistant("b"), {"role": "system", "content": "Now be formal."},
                                         user("c"), assistant("Certainly.")], None),
    ("special-token text in content", [user("Print <|im_end|> and <think> literally"),
                                       assistant("<|im_start|> is a token; so is </tool_call>.")], None),
    ("whitespace and code", [user("Format:\n\n```py\ndef f():\n\treturn 1\n```\n  "),
                             assistant("```py\ndef f() -> int:\n    return 1\n```\n\n\n")], None),
    ("Unicode white space around content (Jinja's trim)",
     [{"role": "system", "content": "\u3000 Be brief.\xa0\n"}, user("\x1c\u2003Hi\u2028 \t"),
      assistant("\u205f\n Hello\u200a\u00a0\u200b"), user("\u200bzero width stays\u200b"), assistant(" ok \x85")],
     None),
    ("one tool call, quoted and non-ASCII tool output",
     [user("Weather in 東京?"), assistant("", tool_calls=[call("get_weather", {"city": "東京", "unit": "°C"})]),
      {"role": "tool", "name": "get_weather", "content": "{\"temp\": 22,\n \"sky\": \"晴れ\\\\\"}\t\u0001"},
      assistant("22 °C and sunny.")], [WEATHER_TOOL, SEARCH_TOOL]),
    ("tool call with string arguments", [{"role": "system", "content": "Tools ready."}, user("Find topotrain"),
                                         assistant("", tool_calls=[call("search", "{\"query\": \"topotrain\"}")]),
                                         {"role": "tool", "content": "3 results"}, assistant("Found 3.")],
     [SEARCH_TOOL]),
    ("an empty tool list", [user("Hi"), assistant("Hello")], []),
]

# Llama only: its template's tool role "ipython", and what it raises for or drops.
LLAMA_CONVERSATIONS = [
    ("ipython tool role", [user("Run it"), assistant("", tool_calls=[call("search", {"query": "q", "limit": 2})]),
                           {"role": "ipython", "content": "[1, 2]"}, assistant("Two results.")], [SEARCH_TOOL]),
]
LLAMA_REFUSALS = [  # (name, messages, tools, what topotrain's message quotes, whether transformers raises)
    ("two tool calls", [user("Both"), assistant("", tool_calls=[call("search", {"query": "a"}),
                                                                call("search", {"query": "b"})])],
     [SEARCH_TOOL], "This model only supports single tool-calls at once!", True),
    ("tools without a user message", [{"role": "system", "content": "s"}], [SEARCH_TOOL],
     "Cannot put tools in the first user message when there's no first user message!", True),
    ("content beside a tool call", [user("Go"), assistant("Searching.", tool_calls=[call("search", {"query": "a"})])],
     [SEARCH_TOOL], "\"content\" beside \"tool_calls\"", False),
]
END_OF_TURN = {"qwen3": "<|im_end|>", "qwen2_5": "<|im_end|>", "llama3": "<|eot_id|>"}
# topotrain-prepare's --eos, which generation stops at: Llama has no <|endoftext|>, its default.
EOS_ARGS = {"llama3": ["--eos", "<|eot_id|>"]}


def renders(family, messages):
    """Whether the family's template renders the conversation (see the module's text)."""
    if family != "qwen3" and any(m.get("reasoning_content") is not None for m in messages):
        return False
    if family == "llama3":
        return all(len(m.get("tool_calls", [None])) == 1 and not (m.get("tool_calls") and m["content"])
                   for m in messages)
    return all(m["role"] != "ipython" for m in messages)


def mask_runs(mask):
    """[start, end) of each maximal run of 1s."""
    runs, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


def check(family, name, messages, tools, ids, mask, hf):
    """The failures of one conversation, each a line."""
    def render(msgs, **options):  # HF's text and ids
        text = hf.apply_chat_template(msgs, tools=tools, tokenize=False, **options)
        return text, hf.apply_chat_template(msgs, tools=tools, tokenize=True, **options)["input_ids"]

    failures = []
    text, reference = render(messages)
    difference = first_difference(ids, reference, text, hf.backend_tokenizer)
    if difference:
        failures.append(f"training rendering: {difference}")
    # The ids spell the text as the tokenizer's normaliser (NFC; Llama: none) writes it.
    normalizer = hf.backend_tokenizer.normalizer
    normalized = normalizer.normalize_str(text) if normalizer else text
    decoded = hf.decode(ids, skip_special_tokens=False)
    if decoded != normalized:
        failures.append(f"decoded ids vs HF's text: {first_text_difference(decoded, normalized)}")

    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    runs = mask_runs(mask)
    end_of_turn = hf.convert_tokens_to_ids(END_OF_TURN[family])
    if len(runs) != len(turns):
        failures.append(f"loss mask: {len(runs)} runs of 1s, {len(turns)} assistant turns")
    for (start, end), turn in zip(runs, turns):
        if ids[end - 1] != end_of_turn:
            failures.append(f"loss mask: the run before token {end} ends with {ids[end - 1]}, "
                            f"not {END_OF_TURN[family]}")
        prompt, prompt_ids = render(messages[:turn], add_generation_prompt=True)
        difference = first_difference(ids[:start], prompt_ids, prompt, hf.backend_tokenizer)
        if difference:
            failures.append(f"generation prompt of messages[{turn}]: {difference}")

    last = messages[-1]
    if (family == "qwen3" and last["role"] == "assistant" and not last.get("reasoning_content")
            and not last.get("tool_calls")
            and "</think>" not in last["content"]):
        prompt, _ = render(messages[:-1], add_generation_prompt=True, enable_thinking=False)
        answered = prompt + last["content"].lstrip("\n") + "<|im_end|>\n"
        difference = first_difference(ids, hf(answered, add_special_tokens=False)["input_ids"], answered,
                                      hf.backend_tokenizer)
        if difference:
            failures.append(f"thinking off: {difference}")
    return [f"{name}: {f}" for f in failures]


def write_conversations(path, conversations):
    with open(path, "w", encoding="utf-8") as out:
        for _, messages, tools in conversations:
            out.write(json.dumps({"messages": messages, "tools": tools}, ensure_ascii=False) + "\n")


def llama_refusals(hf, prepare, tokenizer_json, work):
    """The failures of the Llama refusals: topotrain-prepare must exit 2 naming the reason,
    and transformers must raise where the template raises."""
    failures = []
    path = os.path.join(work, "refused.jsonl")
    for name, messages, tools, quoted, hf_raises in LLAMA_REFUSALS:
        write_conversations(path, [(name, messages, tools)])
        run = subprocess.run([prepare, "--quiet", "--tokenizer", tokenizer_json, "--output",
                              os.path.join(work, "refused.h5"), path] + EOS_ARGS["llama3"],
                             capture_output=True, text=True)
        if run.returncode != 2 or quoted not in run.stderr:
            failures.append(f"{name}: topotrain-prepare exit {run.returncode}, not 2 quoting {quoted!r}: "
                            f"{run.stderr.strip()[:300]}")
        try:
            hf.apply_chat_template(messages, tools=tools, tokenize=False)
            raised = None
        except Exception as e:  # jinja2's TemplateError, as transformers raises it
            raised = str(e)
        if hf_raises and (raised is None or quoted not in raised):
            failures.append(f"{name}: transformers did not raise {quoted!r} ({raised!r})")
    # Llama 3.2's dating of the system turn, which depends on the day the data is made.
    dated = os.path.join(work, "dated")
    os.makedirs(dated)
    config = json.load(open(os.path.join(os.path.dirname(tokenizer_json), "tokenizer_config.json"), encoding="utf-8"))
    config["chat_template"] = config["chat_template"].replace(
        '{%- set date_string = "26 Jul 2024" %}',
        '{%- if strftime_now is defined %}{%- set date_string = strftime_now("%d %b %Y") %}'
        '{%- else %}{%- set date_string = "26 Jul 2024" %}{%- endif %}')
    json.dump(config, open(os.path.join(dated, "tokenizer_config.json"), "w", encoding="utf-8"))
    with open(tokenizer_json, "rb") as src, open(os.path.join(dated, "tokenizer.json"), "wb") as dst:
        dst.write(src.read())
    write_conversations(path, [("dated", [user("Hi"), assistant("Hello")], None)])
    run = subprocess.run([prepare, "--quiet", "--tokenizer", os.path.join(dated, "tokenizer.json"), "--output",
                          os.path.join(work, "dated.h5"), path] + EOS_ARGS["llama3"], capture_output=True, text=True)
    if run.returncode != 2 or "strftime_now" not in run.stderr:
        failures.append(f"strftime_now template: topotrain-prepare exit {run.returncode}, not 2 naming strftime_now: "
                        f"{run.stderr.strip()[:300]}")
    return failures


def main():
    from transformers import AutoTokenizer
    family = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--family" else None
    with tempfile.TemporaryDirectory(prefix="hf_chat_template.") as work:
        if family:
            folder = family_tokenizers.write(family, os.path.join(work, family))
        else:
            folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "data", "qwen3-tokenizer")
        tokenizer_json = os.path.join(folder, "tokenizer.json")
        if not os.path.isfile(tokenizer_json) or not os.path.isfile(os.path.join(folder, "tokenizer_config.json")):
            print(f"SKIP: no Qwen3 tokenizer.json and tokenizer_config.json in {os.path.abspath(folder)} "
                  "(put the Qwen3 tokenizer's files there)")
            return SKIP
        family = family or "qwen3"
        conversations = [(name, messages, tools) for name, messages, tools in CONVERSATIONS
                         + (LLAMA_CONVERSATIONS if family == "llama3" else []) if renders(family, messages)]
        hf = AutoTokenizer.from_pretrained(folder)
        prepare = prepare_binary()
        path, dataset = os.path.join(work, "chat.jsonl"), os.path.join(work, "chat.h5")
        write_conversations(path, conversations)
        subprocess.run([prepare, "--quiet", "--tokenizer", tokenizer_json, "--output", dataset, path]
                       + EOS_ARGS.get(family, []), check=True, stdout=subprocess.DEVNULL)
        documents, _ = read_documents(dataset)
        failures = llama_refusals(hf, prepare, tokenizer_json, work) if family == "llama3" else []
    for f in failures:
        print(f"FAIL: refusal: {f}")
    if len(documents) != len(conversations):
        print(f"FAIL: topotrain-prepare wrote {len(documents)} documents for {len(conversations)} conversations")
        return 1
    for (name, messages, tools), (ids, mask) in zip(conversations, documents):
        found = check(family, name, messages, tools, ids, mask, hf)
        if found:
            print(f"FAIL: {found[0]}" + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
        failures += found
    prompts = sum(m["role"] == "assistant" for _, messages, _ in conversations for m in messages)
    print(("OK" if not failures else f"FAIL: {len(failures)} differences") +
          f": {family}, {len(conversations)} conversations, {prompts} generation prompts, "
          f"{sum(len(ids) for ids, _ in documents)} tokens"
          + (f", {len(LLAMA_REFUSALS) + 1} refusals" if family == "llama3" else ""))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
