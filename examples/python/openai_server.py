#!/usr/bin/env python3
"""Drive kvstash's OpenAI-compatible server from Python with the official `openai` package: start
`kvstash serve` on a free port, stream a chat completion, run a multi-turn chat whose shared prefix the
server's prefix cache reuses (usage.prompt_tokens_details.cached_tokens), then stop the server.

    .venv/bin/python examples/python/openai_server.py [--kvstash build/kvstash] [--model PATH]
"""

import argparse
import os
import re
import subprocess
import sys

from openai import OpenAI

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_BIN = os.path.join(ROOT, "build", "kvstash")


def start_server(binary: str, model: str, threads: int):
    proc = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "-t", str(threads)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:  # "kvstash serve: listening on http://127.0.0.1:PORT (model ...)"
        match = re.search(r"listening on (http://\S+)", line)
        if match:
            return proc, match.group(1)
    proc.wait()
    raise RuntimeError(f"kvstash serve exited with {proc.returncode} before listening")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kvstash", default=os.environ.get("KVSTASH_BIN", DEFAULT_BIN))
    parser.add_argument("--model", default=os.environ.get("KVSTASH_MODEL", DEFAULT_MODEL))
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    proc, url = start_server(args.kvstash, args.model, args.threads)
    try:
        client = OpenAI(base_url=url + "/v1", api_key="unused")
        model_id = client.models.list().data[0].id
        print(f"server at {url}, model {model_id}")
        system = {"role": "system", "content": "You are a patient tutor. Explain things simply, step by step. " * 8}
        messages = [system, {"role": "user", "content": "What is a prime number?"}]

        print("assistant (streamed): ", end="", flush=True)
        pieces = []
        for chunk in client.chat.completions.create(model=model_id, messages=messages, max_tokens=args.max_tokens,
                                                    temperature=0, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
                print(pieces[-1], end="", flush=True)
        print()
        answer = "".join(pieces)
        whole = client.chat.completions.create(model=model_id, messages=messages, max_tokens=args.max_tokens,
                                               temperature=0)
        assert whole.choices[0].message.content == answer  # greedy: streamed == not streamed

        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Is 9 one?"}]
        turn2 = client.chat.completions.create(model=model_id, messages=messages, max_tokens=args.max_tokens,
                                               temperature=0)
        usage = turn2.usage
        cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
        print(f"turn 2: {turn2.choices[0].message.content!r}\n  prompt {usage.prompt_tokens} tokens, "
              f"{cached} of them from the prefix cache")
        assert cached > 0  # the system prompt and turn 1 were not computed again
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
