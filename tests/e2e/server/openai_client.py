"""`kvstash serve` through the official `openai` Python package (streaming and not, chat and completions).

Usage: openai_client.py BASE_URL     (e.g. http://127.0.0.1:8080)
Exits 0 and prints "openai client: N checks passed", or fails with an AssertionError / the client's exception.
Run by tests/e2e/server_clients_test.cpp with the project venv's python (scripts/setup.sh creates it).
"""
import sys

import openai

base = sys.argv[1].rstrip("/")
client = openai.OpenAI(base_url=base + "/v1", api_key="not-needed", max_retries=0, timeout=120)
checks = 0


def check(condition, what):
    global checks
    assert condition, what
    checks += 1


# Models.
models = client.models.list()
check([m.id for m in models.data] == ["SmolLM2-135M-Instruct.Q4_1"], f"models: {models}")

# Chat, not streaming.
messages = [{"role": "user", "content": "What is the capital of France?"}]
chat = client.chat.completions.create(model="any", messages=messages, max_tokens=24, temperature=0)
answer = chat.choices[0].message.content
check("Paris" in answer, f"chat answer: {answer!r}")
check(chat.choices[0].message.role == "assistant", "role")
check(chat.choices[0].finish_reason in ("stop", "length"), chat.choices[0].finish_reason)
check(chat.usage.prompt_tokens > 0 and chat.usage.completion_tokens > 0, f"usage {chat.usage}")
check(chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens, "total_tokens")
check(chat.usage.prompt_tokens_details.cached_tokens >= 0, "cached_tokens")

# Chat, streaming: the same text, piece by piece, with the usage chunk at the end.
pieces, finish, usage = [], None, None
for chunk in client.chat.completions.create(model="any", messages=messages, max_tokens=24, temperature=0, stream=True,
                                            stream_options={"include_usage": True}):
    if chunk.usage:
        usage = chunk.usage
    for choice in chunk.choices:
        if choice.delta.content:
            pieces.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
check("".join(pieces) == answer, f"streamed chat {''.join(pieces)!r} != {answer!r}")
check(len(pieces) > 1, "the chat answer came in several pieces")
check(finish == chat.choices[0].finish_reason, f"finish {finish}")
check(usage is not None and usage.completion_tokens == chat.usage.completion_tokens, f"stream usage {usage}")

# Completions, not streaming and streaming, seeded sampling.
args = dict(model="any", prompt="Once upon a time", max_tokens=20, temperature=0.9, seed=7)
whole = client.completions.create(**args)
text = whole.choices[0].text
check(len(text) > 0, "completion text")
streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **args) if c.choices)
check(streamed == text, f"streamed completion {streamed!r} != {text!r}")
again = client.completions.create(**args)
check(again.choices[0].text == text, "same seed, same text")

# Stop strings and n.
stopped = client.completions.create(model="any", prompt="The capital of France is", max_tokens=16, temperature=0, stop=["."])
check(stopped.choices[0].text == " Paris", f"stop: {stopped.choices[0].text!r}")
check(stopped.choices[0].finish_reason == "stop", "stop reason")
many = client.completions.create(model="any", prompt="My favourite animal is", max_tokens=8, temperature=1.0, seed=3, n=2)
check(len(many.choices) == 2 and [c.index for c in many.choices] == [0, 1], "n=2")

# Logprobs.
lp = client.completions.create(model="any", prompt="The capital of France is", max_tokens=3, temperature=0, logprobs=2)
check(len(lp.choices[0].logprobs.tokens) == 3 and len(lp.choices[0].logprobs.top_logprobs[0]) == 2, "logprobs")

# Errors surface as the client's typed exceptions with the server's message.
try:
    client.completions.create(model="any", prompt="hi", max_tokens=100000)
    check(False, "max_tokens past the context was accepted")
except openai.BadRequestError as e:
    check("max_tokens" in str(e), f"error message: {e}")

print(f"openai client: {checks} checks passed")
