#!/usr/bin/env python3
"""Writes tests/fixtures/chat/tools.json: conversations with tools, tool calls and tool results rendered by
transformers' apply_chat_template(messages, tools=..., add_generation_prompt=...) with the tool-capable
templates kvstash knows (Qwen 2.5, Llama 3.1, Llama 3.2), the oracle for tests/unit/chat_tools_test.cpp.

    HF_HUB_OFFLINE=1 /work/venv-hf/bin/python tests/reference/make_tool_template_fixture.py

The template texts are those of make_chat_template_fixtures.py (its header says where each came from: the
models' tokenizer_config.json as copied into other projects; no hub access here). Renderer as there: the
tokenizer transformers builds from the SmolLM2 GGUF, bos_token="<|begin_of_text|>" for the Llama templates,
date_string="26 Jul 2024" for Llama 3.2 (else strftime_now writes today's date).

Messages are stored as an OpenAI client sends them: a tool call's `arguments` is JSON text. transformers'
templates expect a mapping there (`arguments | tojson`), so this script passes json.loads(arguments), as
llama.cpp's server does and as kvstash does. Cases the template refuses (raise_exception) are stored with
"error" instead of "rendered".
"""
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402  (sets HF_HUB_OFFLINE before transformers is imported)
import make_chat_template_fixtures as chat  # noqa: E402

import jinja2  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
ODD = {"type": "function", "function": {
    "name": "odd_values", "description": "Quotes \" and \\ backslashes, a tab\t, a newline\n, NUL \x00, "
    "DEL \x7f, unicode: café 你好 😀 \u2028.",
    "parameters": {"type": "object", "properties": {
        "ratio": {"type": "number", "minimum": 0.1, "maximum": 1e16, "default": 1.0, "multipleOf": 1e-05,
                  "examples": [1.5, -2.25, 123456789.125, 1e-07, 3e+20, 0.0001, 100.0]},
        "count": {"type": "integer", "default": -3, "big": 18446744073709551615},
        "flags": {"type": "array", "items": {"type": "boolean"}, "default": [True, False]},
        "empty": {"type": "object", "properties": {}, "default": {}},
        "nothing": {"type": "null", "default": None, "list": []}},
        "required": []}}}
NO_PARAMS = {"type": "function", "function": {"name": "now", "description": "The time.",
                                               "parameters": {"type": "object", "properties": {}}}}


def S(c):
    return {"role": "system", "content": c}


def U(c):
    return {"role": "user", "content": c}


def A(c):
    return {"role": "assistant", "content": c}


def CALLS(content, *calls):
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
        for i, (name, args) in enumerate(calls)]}


def T(call_id, content):
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# (messages, tools, add_generation_prompt)
CASES = [
    ([U("What is the weather in Paris?")], [WEATHER], True),
    ([S("  You are a weather bot. \n"), U(" Paris? ")], [WEATHER, NO_PARAMS], True),
    ([U("Weather in Paris?"), CALLS(None, ("get_weather", '{"city": "Paris", "unit": "celsius"}')),
      T("call_0", "22 degrees, \"sunny\"\nwindy"), A("It is 22 degrees and sunny.")], [WEATHER], False),
    ([U("Weather in Paris?"), CALLS("", ("get_weather", '{"city":"Paris"}')), T("call_0", "22")], [WEATHER], True),
    ([U("Paris and Tokyo?"), CALLS(None, ("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Tokyo"}')),
      T("call_0", "22"), T("call_1", "30"), U("Thanks. And the time?")], [WEATHER, NO_PARAMS], True),
    ([S("Be brief."), U("Let me check."), CALLS("Checking the weather.", ("get_weather", '{"city": "Paris"}')),
      T("call_0", "rain")], [WEATHER], True),
    ([U("Odd values?")], [ODD], True),
    ([U("Odd arguments"), CALLS(None, ("odd_values", '{"ratio": 0.5, "count": 7, "flags": [true, false], '
                                                      '"s": "tab\\t \\"q\\" caf\\u00e9 \\u0001", "big": 1e300, '
                                                      '"empty": {}, "nothing": null, "list": []}')),
      T("call_0", "{\"ok\": true}")], [ODD], True),
    # No tools, but a conversation that holds calls and results.
    ([U("Weather?"), CALLS(None, ("get_weather", '{"city": "Paris"}')), T("call_0", "22")], [], True),
    ([U("Hi!")], [], True),
]


def for_transformers(messages):
    out = copy.deepcopy(messages)
    for m in out:
        for call in m.get("tool_calls", []):
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        if "tool_calls" not in m:
            m.pop("tool_call_id", None)
        if m.get("content") is None:
            m["content"] = None
    return out


def main() -> None:
    tok = AutoTokenizer.from_pretrained(chat.MODEL_DIR, gguf_file=chat.MODEL_FILE)
    versions = refutil.versions()
    versions["jinja2"] = jinja2.__version__
    templates = {name: chat.TEMPLATES[name] for name in ("qwen2_5", "llama3_1", "llama3_2")}
    out = {"generator": refutil.generator(__file__), "versions": versions,
           "method": "AutoTokenizer.from_pretrained(models/, gguf_file=SmolLM2 GGUF).apply_chat_template(messages "
                     "(tool-call arguments json.loads-ed), tools=tools or None, chat_template=template, "
                     "tokenize=False, add_generation_prompt=...); Llama: bos_token='<|begin_of_text|>', "
                     "date_string='26 Jul 2024'",
           "templates": {}}
    for name, (text, source, expected) in templates.items():
        kwargs = {}
        if name.startswith("llama3"):
            kwargs = {"bos_token": "<|begin_of_text|>", "date_string": chat.FIXED_DATE}
        cases = []
        for messages, tools, add_gen in CASES:
            case = {"messages": messages, "tools": tools, "add_generation_prompt": add_gen}
            try:
                case["rendered"] = tok.apply_chat_template(for_transformers(messages), tools=tools or None,
                                                           chat_template=text, tokenize=False,
                                                           add_generation_prompt=add_gen, **kwargs)
            except Exception as e:  # the template's raise_exception (jinja2 TemplateError)
                case["error"] = str(e)
            cases.append(case)
        out["templates"][name] = {"template_source": source, "expected_detection": expected, "template": text,
                                  "cases": cases}
        print(f"{name}: {len(cases)} cases, {sum('error' in c for c in cases)} refused")
    path = os.path.join(chat.OUT_DIR, "tools.json")
    refutil.write_json(path, out)
    print(refutil.rel(path))


if __name__ == "__main__":
    main()
