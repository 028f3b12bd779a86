"""A `kvstash serve --models DIR` of alpha.gguf, beta.gguf and broken.gguf through the official `ollama` and
`openai` Python packages: both list the three models, a chat on each of the two good ones answers, and the
broken one raises the client's error with the load failure.

Usage: models_client.py BASE_URL     Run by tests/e2e/server_models_test.cpp with the project venv's python.
"""
import sys

import ollama
import openai

base = sys.argv[1].rstrip("/")
checks = 0


def check(condition, what):
    global checks
    assert condition, what
    checks += 1


o = ollama.Client(host=base, timeout=120)
names = sorted(m.model for m in o.list().models)
check(names == ["alpha:latest", "beta:latest", "broken:latest"], f"ollama list: {names}")
check(o.ps().models == [], "nothing loaded at start")
for name in ("alpha", "beta"):
    reply = o.chat(model=name, messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2})
    check(reply.message.role == "assistant", f"ollama chat on {name}")
check(sorted(m.model for m in o.ps().models) == ["alpha:latest", "beta:latest"], "both loaded")
try:
    o.generate(model="broken", prompt="Hi")
    check(False, "broken model answered")
except ollama.ResponseError as e:
    check(e.status_code == 500 and "could not be loaded" in e.error, f"broken: {e.status_code} {e.error}")

c = openai.OpenAI(base_url=base + "/v1", api_key="none")
ids = [m.id for m in c.models.list().data]
check(ids == ["alpha", "beta", "broken"], f"openai models: {ids}")
for name in ("alpha", "beta"):
    r = c.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    check(r.model == name, f"openai chat model {r.model}")
try:
    c.completions.create(model="missing", prompt="Hi", max_tokens=1)
    check(False, "unknown model answered")
except openai.NotFoundError as e:
    check("not found" in str(e), str(e))

print(f"models client: {checks} checks passed")
