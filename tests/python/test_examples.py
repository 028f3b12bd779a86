"""The examples under examples/python/ double as tests: each runs in its own process (short
generations) and checks its own claims with asserts."""

import os
import pathlib
import subprocess
import sys

import pytest

from conftest import ROOT, model_path

EXAMPLES = ROOT / "examples" / "python"


def run_example(name: str, *args: str) -> str:
    cmd = [sys.executable, str(EXAMPLES / name), "--model", model_path(), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{name} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_chat_cached_system_prompt():
    out = run_example("chat_cached_system_prompt.py", "--max-tokens", "12")
    assert "computed once" in out and "reused]" in out


def test_prefix_save_load():
    out = run_example("prefix_save_load.py", "--max-tokens", "12")
    assert "same answers" in out


def test_fork_continuations():
    out = run_example("fork_continuations.py", "--max-tokens", "12")
    assert "continuation 3" in out


def test_openai_server():
    pytest.importorskip("openai")
    binary = os.environ.get("KVSTASH_BIN", str(ROOT / "build" / "kvstash"))
    if not pathlib.Path(binary).exists():
        pytest.skip(f"no kvstash binary at {binary} (build it, or set KVSTASH_BIN)")
    out = run_example("openai_server.py", "--kvstash", binary, "--max-tokens", "12")
    assert "from the prefix cache" in out
