"""Shared fixtures of the Python package's tests (run by scripts/test.sh through ctest, or directly:
.venv/bin/python -m pytest tests/python)."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY = ROOT / "tests" / "fixtures" / "tiny"

kvstash = pytest.importorskip("kvstash")


def model_path() -> str:
    return os.environ.get("KVSTASH_MODEL", str(DEFAULT_MODEL))


@pytest.fixture(scope="session")
def model():
    path = model_path()
    if not os.path.exists(path):
        pytest.fail(f"no model at {path}: run scripts/setup.sh")
    return kvstash.Model(path, threads=2)


@pytest.fixture(scope="session")
def tiny_model():
    return kvstash.Model(str(TINY / "gqa_f32.gguf"), threads=1)
