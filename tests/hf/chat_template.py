"""topotrain's rendering of the Qwen3 chat template against transformers' apply_chat_template,
over conversations with system, user, assistant and tool turns, reasoning, tool calls and
non-ASCII content.

    chat_template.py [TOKENIZER_DIR]     (default: ../shared/data/qwen3-tokenizer beside the repository)

topotrain's side: topotrain-prepare (TOPOTRAIN_BIN) with the folder's tokenizer.json renders
each conversation ({"messages", "tools"} JSONL lines) with the chat_template of the folder's
tokenizer_config.json and writes its ids and loss mask, read back with h5py. The reference:
AutoTokenizer.from_pretrained(folder).apply_chat_template(messages, tools=tools, ...). Checked,
each exactly:
  * training rendering: the ids equal apply_chat_template(tokenize=True)'s (no generation
    prompt), and HF's decode of them equals its tokenize=False text, NFC-normalised;
  * generation prompts, as topotrain-speculate takes them from a dataset (the tokens before
    each run of loss mask 1): those before assistant message i's run equal
    apply_chat_template(messages[:i], add_generation_prompt=True)'s ids (enable_thinking at its
    default); there is one run per assistant turn and each ends with <|im_end|>;
  * thinking off: where the last turn is an answer without reasoning or tool calls, the ids
    are those of apply_chat_template(messages[:-1], add_generation_prompt=True,
    enable_thinking=False) followed by the answer and "<|im_end|>\\n": the template's
    non-thinking mode.
Prints the first difference of each conversation with its code points; exit 1 on any, 77
(skipped) without the tokenizer.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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
]


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


def check(name, messages, tools, ids, mask, hf):
    """The failures of one conversation, each a line."""
    def render(msgs, **options):  # HF's text and ids
        text = hf.apply_chat_template(msgs, tools=tools, tokenize=False, **options)
        return text, hf.apply_chat_template(msgs, tools=tools, tokenize=True, **options)["input_ids"]

    failures = []
    text, reference = render(messages)
    difference = first_difference(ids, reference, text, hf.backend_tokenizer)
    if difference:
        failures.append(f"training rendering: {difference}")
    # The ids spell the text as the tokenizer's normaliser (NFC) writes it.
    normalized = hf.backend_tokenizer.normalizer.normalize_str(text)
    decoded = hf.decode(ids, skip_special_tokens=False)
    if decoded != normalized:
        failures.append(f"decoded ids vs HF's text: {first_text_difference(decoded, normalized)}")

    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    runs = mask_runs(mask)
    end_of_turn = hf.convert_tokens_to_ids("<|im_end|>")
    if len(runs) != len(turns):
        failures.append(f"loss mask: {len(runs)} runs of 1s, {len(turns)} assistant turns")
    for (start, end), turn in zip(runs, turns):
        if ids[end - 1] != end_of_turn:
            failures.append(f"loss mask: the run before token {end} ends with {ids[end - 1]}, not <|im_end|>")
        prompt, prompt_ids = render(messages[:turn], add_generation_prompt=True)
        difference = first_difference(ids[:start], prompt_ids, prompt, hf.backend_tokenizer)
        if difference:
            failures.append(f"generation prompt of messages[{turn}]: {difference}")

    last = messages[-1]
    if (last["role"] == "assistant" and not last.get("reasoning_content") and not last.get("tool_calls")
            and "</think>" not in last["content"]):
        prompt, _ = render(messages[:-1], add_generation_prompt=True, enable_thinking=False)
        answered = prompt + last["content"].lstrip("\n") + "<|im_end|>\n"
        difference = first_difference(ids, hf(answered, add_special_tokens=False)["input_ids"], answered,
                                      hf.backend_tokenizer)
        if difference:
            failures.append(f"thinking off: {difference}")
    return [f"{name}: {f}" for f in failures]


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "data", "qwen3-tokenizer")
    tokenizer_json = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(tokenizer_json) or not os.path.isfile(os.path.join(folder, "tokenizer_config.json")):
        print(f"SKIP: no Qwen3 tokenizer.json and tokenizer_config.json in {os.path.abspath(folder)} "
              "(put the Qwen3 tokenizer's files there)")
        return SKIP
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(folder)
    prepare = prepare_binary()
    with tempfile.TemporaryDirectory(prefix="hf_chat_template.") as work:
        conversations, dataset = os.path.join(work, "chat.jsonl"), os.path.join(work, "chat.h5")
        with open(conversations, "w", encoding="utf-8") as out:
            for _, messages, tools in CONVERSATIONS:
                out.write(json.dumps({"messages": messages, "tools": tools}, ensure_ascii=False) + "\n")
        subprocess.run([prepare, "--quiet", "--tokenizer", tokenizer_json, "--output", dataset, conversations],
                       check=True, stdout=subprocess.DEVNULL)
        documents, _ = read_documents(dataset)
    if len(documents) != len(CONVERSATIONS):
        print(f"FAIL: topotrain-prepare wrote {len(documents)} documents for {len(CONVERSATIONS)} conversations")
        return 1
    failures = []
    for (name, messages, tools), (ids, mask) in zip(CONVERSATIONS, documents):
        found = check(name, messages, tools, ids, mask, hf)
        if found:
            print(f"FAIL: {found[0]}" + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
        failures += found
    prompts = sum(m["role"] == "assistant" for _, messages, _ in CONVERSATIONS for m in messages)
    print(("OK" if not failures else f"FAIL: {len(failures)} differences") +
          f": {len(CONVERSATIONS)} conversations, {prompts} generation prompts, "
          f"{sum(len(ids) for ids, _ in documents)} tokens")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
