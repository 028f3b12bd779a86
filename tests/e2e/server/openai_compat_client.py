"""Issue 33 item 8 through the official `openai` Python package: the Responses API (client.responses.create,
streamed and not, text.format json_schema), and /v1/completions with an array `prompt` (one set of choices
per prompt, OpenAI's numbering), token-id prompts and `echo`.

Usage: openai_compat_client.py BASE_URL     (e.g. http://127.0.0.1:8080)
Exits 0 and prints "openai compat client: N checks passed", or fails with an AssertionError.
Run by tests/e2e/server_compat_test.cpp with the project venv's python (scripts/setup.sh creates it).
"""
import json
import sys

import openai

base = sys.argv[1].rstrip("/")
client = openai.OpenAI(base_url=base + "/v1", api_key="not-needed", max_retries=0, timeout=120)
checks = 0


def check(condition, what):
    global checks
    assert condition, what
    checks += 1


# Responses, not streamed: the SDK's output_text aggregates the output message's text.
response = client.responses.create(model="any", instructions="Answer in one word.",
                                   input="What is the capital of France?", max_output_tokens=16, temperature=0)
check(response.object == "response" and response.id.startswith("resp_"), f"response: {response}")
check(response.status in ("completed", "incomplete"), f"status: {response.status}")
check("Paris" in response.output_text, f"output_text: {response.output_text!r}")
check(response.output[0].type == "message" and response.output[0].role == "assistant", f"output: {response.output}")
check(response.usage.input_tokens > 0 and response.usage.output_tokens > 0, f"usage: {response.usage}")
check(response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens, "total tokens")

# Cut by max_output_tokens: incomplete, with the reason.
short = client.responses.create(model="any", input="Write a long story about a dragon.", max_output_tokens=3)
check(short.status == "incomplete" and short.incomplete_details.reason == "max_output_tokens", f"short: {short}")
check(short.usage.output_tokens == 3, f"short usage: {short.usage}")

# Streamed: the typed events, in order; the deltas make the final text.
events = list(client.responses.create(model="any", input=[
    {"role": "user", "content": [{"type": "input_text", "text": "What is the capital of France?"}]}],
    max_output_tokens=16, temperature=0, stream=True))
types = [e.type for e in events]
check(types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                    "response.content_part.added"], f"first events: {types[:4]}")
check(types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.completed"] or types[-1] == "response.incomplete", f"last events: {types[-4:]}")
check([e.sequence_number for e in events] == list(range(len(events))), "sequence numbers")
deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
final = events[-1].response
check(deltas == final.output_text and "Paris" in deltas, f"deltas {deltas!r} vs {final.output_text!r}")
check(deltas == response.output_text, "streamed text equals the non-streamed one (temperature 0)")

# Structured output through text.format, the schema's order kept.
schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}, "country": {"type": "string", "maxLength": 20}},
          "required": ["city", "country"], "additionalProperties": False}
structured = client.responses.create(model="any", input="Name a city and its country as JSON.", max_output_tokens=60,
                                     temperature=0, text={"format": {"type": "json_schema", "name": "place",
                                                                     "schema": schema, "strict": True}})
if structured.status == "completed":
    doc = json.loads(structured.output_text)
    check(list(doc.keys()) == ["city", "country"], f"structured: {structured.output_text!r}")

# Completions with an array prompt: n choices per prompt, index = prompt * n + choice.
prompts = ["The capital of France is", "The capital of Italy is"]
many = client.completions.create(model="any", prompt=prompts, max_tokens=4, temperature=0, n=2)
check([c.index for c in many.choices] == [0, 1, 2, 3], f"indices: {[c.index for c in many.choices]}")
for p, prompt in enumerate(prompts):
    alone = client.completions.create(model="any", prompt=prompt, max_tokens=4, temperature=0)
    check(many.choices[2 * p].text == alone.choices[0].text == many.choices[2 * p + 1].text,
          f"prompt {p}: {many.choices[2 * p].text!r} vs {alone.choices[0].text!r}")
    check(many.usage.prompt_tokens > alone.usage.prompt_tokens or p == 1, "usage sums the prompts")

# Token ids as the prompt, and echo.
echoed = client.completions.create(model="any", prompt="The capital of France is", max_tokens=4, temperature=0,
                                   echo=True)
plain = client.completions.create(model="any", prompt="The capital of France is", max_tokens=4, temperature=0)
check(echoed.choices[0].text == "The capital of France is" + plain.choices[0].text, f"echo: {echoed.choices[0].text!r}")

stream = client.completions.create(model="any", prompt=prompts, max_tokens=4, temperature=0, stream=True, echo=True)
texts = {}
for chunk in stream:
    for c in chunk.choices:
        texts[c.index] = texts.get(c.index, "") + c.text
check(sorted(texts) == [0, 1] and all(texts[i].startswith(prompts[i]) for i in (0, 1)), f"streamed array: {texts}")

print(f"openai compat client: {checks} checks passed")
