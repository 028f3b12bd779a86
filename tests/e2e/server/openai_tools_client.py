"""Tool calling through the official `openai` Python package: a forced call (tool_choice named), not
streamed and streamed, parsed by the client; the stream's delta.tool_calls are accumulated as OpenAI's
clients do. Prints one JSON line {"calls": [[name, arguments], ...]} for the caller to validate.

Usage: openai_tools_client.py BASE_URL TOOLS_JSON_FILE
Run by tests/e2e/server_tools_test.cpp with the project venv's python.
"""
import json
import sys

import openai

base, tools_file = sys.argv[1].rstrip("/"), sys.argv[2]
tools = json.load(open(tools_file))
client = openai.OpenAI(base_url=base + "/v1", api_key="not-needed", max_retries=0, timeout=120)
messages = [{"role": "user", "content": "What is the weather in Paris?"}]
calls = []

for seed in (1, 2):
    chat = client.chat.completions.create(
        model="any", messages=messages, tools=tools, seed=seed, max_tokens=300, parallel_tool_calls=False,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = chat.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls, choice
    for call in choice.message.tool_calls:
        assert call.type == "function" and call.id.startswith("call_"), call
        assert call.function.name == "get_weather", call
        calls.append([call.function.name, call.function.arguments])

    # The same request streamed: the same call, arriving as delta.tool_calls.
    stream = client.chat.completions.create(
        model="any", messages=messages, tools=tools, seed=seed, max_tokens=300, parallel_tool_calls=False, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    streamed = {}
    finish = None
    for chunk in stream:
        for c in chunk.choices:
            for d in c.delta.tool_calls or []:
                entry = streamed.setdefault(d.index, {"name": "", "arguments": ""})
                if d.function and d.function.name:
                    entry["name"] += d.function.name
                if d.function and d.function.arguments:
                    entry["arguments"] += d.function.arguments
            finish = c.finish_reason or finish
    assert finish == "tool_calls", finish
    got = [[streamed[i]["name"], streamed[i]["arguments"]] for i in sorted(streamed)]
    want = [[c.function.name, c.function.arguments] for c in choice.message.tool_calls]
    assert got == want, (got, want)

# A conversation that carries the call and its result goes back to the model.
followup = messages + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": calls[0][1]}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "22 degrees"}]
chat = client.chat.completions.create(model="any", messages=followup, tools=tools, tool_choice="none", max_tokens=8,
                                      seed=3)
assert chat.choices[0].message.content is not None and not chat.choices[0].message.tool_calls, chat
print(json.dumps({"calls": calls}))
