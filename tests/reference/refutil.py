"""Shared helpers for the reference-fixture generators (JSON writing, versions, float formatting)."""
import json
import os
import platform
import sys

import numpy as np

# No network: transformers must never try the Hugging Face hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(REPO_ROOT, "tests", "fixtures")


def versions() -> dict:
    import gguf  # noqa: F401
    import tokenizers
    import torch
    import transformers
    from importlib.metadata import version

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gguf": version("gguf"),
        "tokenizers": tokenizers.__version__,
        "numpy": np.__version__,
        "accelerate": version("accelerate"),  # transformers requires it to load GGUF files
    }


def f32(x) -> float:
    """A Python float whose repr is the shortest decimal that round-trips the float32 value.

    json then writes e.g. 0.1 rather than 0.10000000149011612; parsing that decimal (to double, then
    to float) gives back exactly the same float32.
    """
    v = np.float32(x)
    out = float(str(v))
    assert np.float32(out) == v or (np.isnan(v) and np.isnan(out))
    return out


def f32_list(a) -> list:
    return [f32(x) for x in np.asarray(a, dtype=np.float32).ravel()]


def f32_rows(a) -> list:
    a = np.asarray(a, dtype=np.float32)
    return [f32_list(row) for row in a]


def rel(path: str) -> str:
    return os.path.relpath(path, REPO_ROOT)


def generator(script_file: str) -> str:
    return rel(os.path.abspath(script_file))


def _dump(v) -> str:
    # ensure_ascii=False keeps non-English test strings readable; compact separators keep size down.
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def write_json(path: str, obj: dict) -> None:
    """Plain JSON, laid out for readable diffs: one top-level key per line, and a top-level list
    of lists/objects (logits rows, corpus entries) with one element per line."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    parts = []
    for k, v in obj.items():
        if isinstance(v, list) and v and all(isinstance(e, (list, dict)) for e in v):
            body = "[\n" + ",\n".join("  " + _dump(e) for e in v) + "\n]"
        else:
            body = _dump(v)
        parts.append(_dump(k) + ": " + body)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("{\n" + ",\n".join(parts) + "\n}\n")
    with open(path, encoding="utf-8") as f:
        assert json.load(f) == obj


def command_line() -> str:
    return " ".join([os.path.basename(sys.executable)] + [rel(os.path.abspath(sys.argv[0]))] + sys.argv[1:])
