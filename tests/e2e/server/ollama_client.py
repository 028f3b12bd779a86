"""`kvstash serve` through the official `ollama` Python package (Ollama's API: /api/chat, /api/generate
streamed and not, /api/tags, /api/ps, /api/show, /api/embed, /api/version, options, format, errors).

Usage: ollama_client.py BASE_URL MODEL_NAME     (e.g. http://127.0.0.1:8080 SmolLM2-135M-Instruct.Q4_1)
Exits 0 and prints "ollama client: N checks passed", or fails with an AssertionError / the client's exception.
Run by tests/e2e/server_ollama_test.cpp with the project venv's python (scripts/setup.sh installs `ollama`).
"""
import json
import math
import sys

import ollama

base, name = sys.argv[1].rstrip("/"), sys.argv[2]
client = ollama.Client(host=base, timeout=120)
model = name + ":latest"
checks = 0


def check(condition, what):
    global checks
    assert condition, what
    checks += 1


def expect_error(status, fragment, call):
    try:
        call()
    except ollama.ResponseError as e:
        check(e.status_code == status and fragment in str(e.error), f"{status} {fragment!r}: got {e.status_code} {e.error!r}")
        return
    raise AssertionError(f"expected HTTP {status} ({fragment})")


# Models: the one the server was started with, loaded.
tags = client.list()
check([m.model for m in tags.models] == [model], f"tags: {tags}")
check(tags.models[0].size > 0 and tags.models[0].details.family == "llama", f"tags: {tags}")
ps = client.ps()
check([m.model for m in ps.models] == [model] and ps.models[0].context_length > 0, f"ps: {ps}")
show = client.show(model)
check("completion" in show.capabilities and show.modelinfo["general.architecture"] == "llama", f"show: {show}")
check(client._request_raw("GET", "/api/version").json()["version"], "version")

# Chat, not streaming and streaming: the same greedy answer.
messages = [{"role": "user", "content": "What is the capital of France?"}]
opts = {"temperature": 0, "num_predict": 24}
chat = client.chat(model=model, messages=messages, options=opts, stream=False)
check("Paris" in chat.message.content and chat.message.role == "assistant", f"chat: {chat}")
check(chat.done and chat.done_reason in ("stop", "length"), f"chat: {chat}")
check(chat.prompt_eval_count > 0 and 0 < chat.eval_count <= 24 and chat.total_duration > 0, f"counts: {chat}")
pieces, last = [], None
for part in client.chat(model=name, messages=messages, options=opts, stream=True):
    pieces.append(part.message.content)
    last = part
check("".join(pieces) == chat.message.content, f"stream {''.join(pieces)!r} != {chat.message.content!r}")
check(last.done and last.done_reason == chat.done_reason and last.eval_count == chat.eval_count, f"last: {last}")

# Generate: through the chat template (like chat), raw, streamed; an empty prompt loads the model.
gen = client.generate(model=model, prompt="What is the capital of France?", options=opts)
check(gen.response == chat.message.content, f"generate {gen.response!r} vs chat {chat.message.content!r}")
raw = client.generate(model=model, prompt="The capital of France is", raw=True, options={"temperature": 0, "num_predict": 4})
check("Paris" in raw.response, f"raw: {raw.response!r}")
streamed = "".join(p.response for p in client.generate(model=model, prompt="The capital of France is", raw=True,
                                                       options={"temperature": 0, "num_predict": 4}, stream=True))
check(streamed == raw.response, f"raw stream {streamed!r}")
load = client.generate(model=model, prompt="", keep_alive="5m")
check(load.done and load.done_reason == "load", f"load: {load}")
load = client.chat(model=model, messages=[])
check(load.done and load.done_reason == "load" and load.message.content == "", f"chat load: {load}")

# Options: num_predict, seed, stop.
short = client.generate(model=model, prompt="Once upon a time", raw=True, options={"num_predict": 3, "seed": 7})
check(short.eval_count == 3 and short.done_reason == "length", f"num_predict: {short}")
again = client.generate(model=model, prompt="Once upon a time", raw=True, options={"num_predict": 3, "seed": 7})
check(again.response == short.response, "same seed, same text")
stopped = client.generate(model=model, prompt="1, 2, 3, 4,", raw=True,
                          options={"temperature": 0, "num_predict": 20, "stop": [","]})
check("," not in stopped.response and stopped.done_reason == "stop", f"stop: {stopped}")

# format: JSON (constrained), and a schema.
js = client.chat(model=model, messages=[{"role": "user", "content": "Describe Paris as JSON."}], format="json",
                 options={"temperature": 0, "num_predict": 200})
check(js.message.content.lstrip().startswith("{"), f"json: {js.message.content!r}")
if js.done_reason == "stop":
    json.loads(js.message.content)
schema = {"type": "object", "properties": {"capital": {"type": "string", "maxLength": 12}}, "required": ["capital"]}
sj = client.chat(model=model, messages=messages, format=schema, options={"temperature": 0, "num_predict": 60})
check(sj.done_reason == "stop" and "capital" in json.loads(sj.message.content), f"schema: {sj.message.content!r}")

# Embeddings: one per input, unit length.
emb = client.embed(model=model, input=["Hello", "The capital of France"])
check(len(emb.embeddings) == 2 and len(emb.embeddings[0]) == show.modelinfo["llama.embedding_length"], "embed")
check(abs(math.sqrt(sum(x * x for x in emb.embeddings[0])) - 1) < 1e-4, "unit length")
legacy = client.embeddings(model=model, prompt="Hello").embedding  # the older route: not normalised
norm = math.sqrt(sum(x * x for x in legacy))
check(len(legacy) == len(emb.embeddings[0]) and abs(norm - 1) > 1e-3, f"legacy norm {norm}")
check(max(abs(a / norm - b) for a, b in zip(legacy, emb.embeddings[0])) < 1e-4, "same direction as /api/embed")

# Errors in Ollama's shape, with the status the client reports.
expect_error(404, "not found", lambda: client.chat(model="no-such-model", messages=messages))
expect_error(400, "num_gpu", lambda: client.generate(model=model, prompt="Hi", options={"num_gpu": 1}))
expect_error(400, "images", lambda: client.generate(model=model, prompt="Hi", images=[b"\x89PNG"]))
expect_error(400, "keep_alive", lambda: client.generate(model=model, prompt="Hi", keep_alive="soon"))
expect_error(400, "template", lambda: client.generate(model=model, prompt="Hi", template="{{ .Prompt }}"))
expect_error(400, "num_ctx", lambda: client.generate(model=model, prompt="Hi", options={"num_ctx": 1 << 23}))
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
expect_error(400, "defines no tools", lambda: client.chat(model=model, messages=messages, tools=tools))

print(f"ollama client: {checks} checks passed")
