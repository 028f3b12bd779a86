"""Adapters from Python (issue 33 items 6 and 7): LoRA and control vectors per State and Session, as the
CLI's --lora / --control-vector; a state file saved under adapters and loaded without them (or the other
way round) is refused as an adapters mismatch, not as "another model".

Reference: tests/fixtures/adapters/adapters.json (tests/reference/make_adapters.py): every position's
logits of the tiny base model under the LoRA (transformers + PEFT, and llama.cpp) and under the control
vector (a forward hook, and llama.cpp)."""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import kvstash
from conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "adapters"
REFERENCE = json.loads((FIXTURES / "adapters.json").read_text())
CLI = pathlib.Path(os.environ.get("KVSTASH_BIN", str(ROOT / "build" / "kvstash")))


@pytest.fixture(scope="module")
def base():
    return kvstash.Model(str(FIXTURES / "base.gguf"), threads=1)


def all_logits(model, adapters=None):
    state = kvstash.State(model, n_ctx=64, kv_type="f32", adapters=adapters)
    return model.eval(state, REFERENCE["tokens"], all_logits=True)


def relative_error(ours, reference):
    reference = np.asarray(reference, dtype=np.float64)
    return float(np.max(np.abs(ours - reference)) / np.max(np.abs(reference)))


def test_lora_and_control_vector_match_the_references(base):
    plain = all_logits(base)
    assert relative_error(plain, REFERENCE["logits_base"]) < 1e-5
    lora = kvstash.Adapters(base, lora=[str(FIXTURES / "lora.gguf")])
    assert len(lora) == 1 and "lora" in repr(lora)
    with_lora = all_logits(base, lora)
    assert relative_error(with_lora, REFERENCE["logits_lora_peft"]) < 1e-5
    assert relative_error(with_lora, REFERENCE["logits_lora_llamacpp"]) < 1e-4
    assert relative_error(plain, REFERENCE["logits_lora_peft"]) > 1e-2  # the adapter really moves them

    scale = REFERENCE["cvec_scale"]
    cvec = kvstash.Adapters(base, control_vectors=[(str(FIXTURES / "cvec.gguf"), scale)])
    assert relative_error(all_logits(base, cvec), REFERENCE["logits_cvec_hf"]) < 1e-5
    layer = REFERENCE["cvec_range"]
    ranged = kvstash.Adapters(
        base, control_vectors=[(str(FIXTURES / "cvec.gguf"), scale)], control_vector_layers=(layer, layer)
    )
    assert relative_error(all_logits(base, ranged), REFERENCE["logits_cvec_llamacpp_range"]) < 1e-4


def test_prefill_fork_and_state_carry_the_adapters(base):
    lora = kvstash.Adapters(base, lora=[str(FIXTURES / "lora.gguf")])
    state = base.prefill(REFERENCE["tokens"], n_ctx=64, kv_type="f32", adapters=lora)
    assert state.adapters.startswith("lora ")
    assert state.fork().adapters == state.adapters
    assert kvstash.State(base).adapters == "no adapters"
    assert np.array_equal(state.logits, all_logits(base, lora)[-1])


def test_adapters_of_another_model_are_refused(base, tiny_model):
    lora = kvstash.Adapters(base, lora=[str(FIXTURES / "lora.gguf")])
    with pytest.raises(kvstash.InvalidArgument, match="another Model"):
        kvstash.State(tiny_model, adapters=lora)


def test_state_file_under_adapters_reports_the_adapters(base, tmp_path):
    """Item 6: saved under a control vector, loaded without it: AdapterMismatch naming the adapters."""
    cvec = kvstash.Adapters(base, control_vectors=[(str(FIXTURES / "cvec.gguf"), REFERENCE["cvec_scale"])])
    state = base.prefill(REFERENCE["tokens"], n_ctx=64, adapters=cvec)
    path = tmp_path / "cvec.kvs"
    state.save(str(path))
    with pytest.raises(kvstash.AdapterMismatch) as error:
        kvstash.State.load(base, str(path))
    message = str(error.value)
    assert "saved under adapters" in message and "without adapters" in message, message
    assert "another model" not in message
    assert isinstance(error.value, kvstash.ModelMismatch)  # code written for ModelMismatch still catches it

    plain_path = tmp_path / "plain.kvs"
    base.prefill(REFERENCE["tokens"], n_ctx=64).save(str(plain_path))
    with pytest.raises(kvstash.AdapterMismatch, match="saved without adapters"):
        kvstash.State.load(base, str(plain_path), adapters=cvec)

    loaded = kvstash.State.load(base, str(path), adapters=cvec)
    assert loaded.tokens == state.tokens
    assert np.array_equal(loaded.logits, state.logits)


def test_state_file_saved_by_the_cli_under_a_control_vector(base, tmp_path):
    """The issue's case: `kvstash prefill --control-vector`, then State.load in Python without it."""
    if not CLI.exists():
        pytest.fail(f"no CLI at {CLI}: build the kvstash_cli target")
    path = tmp_path / "cli_cvec.kvs"
    subprocess.run(
        [str(CLI), "prefill", "-m", str(FIXTURES / "base.gguf"), "-p", "hello there", "-o", str(path),
         "--control-vector", str(FIXTURES / "cvec.gguf")],
        check=True, capture_output=True,
    )
    with pytest.raises(kvstash.AdapterMismatch, match="saved under adapters"):
        kvstash.State.load(base, str(path))
    cvec = kvstash.Adapters(base, control_vectors=[str(FIXTURES / "cvec.gguf")])
    assert len(kvstash.State.load(base, str(path), adapters=cvec)) > 0


def test_session_under_adapters(base, tmp_path):
    lora = kvstash.Adapters(base, lora=[str(FIXTURES / "lora.gguf")])
    chat = kvstash.Session(base, "sys", template="chatml", n_ctx=256, adapters=lora)
    assert chat.adapters.startswith("lora ")
    chat.complete("hi", max_tokens=4, temperature=0)
    path = tmp_path / "session.kvs"
    chat.save(str(path))
    with pytest.raises(kvstash.AdapterMismatch):
        kvstash.Session.open(base, str(path), template="chatml")
    resumed = kvstash.Session.open(base, str(path), template="chatml", adapters=lora)
    assert resumed.messages == chat.messages

    # set_adapters recomputes the conversation under the new weights: bitwise a fresh session's tokens.
    plain = kvstash.Session(base, "sys", template="chatml", n_ctx=256)
    chat.undo()
    chat.set_adapters(None)
    assert chat.adapters == "no adapters"
    again = chat.complete("hi", max_tokens=4, temperature=0)
    assert again.tokens == plain.complete("hi", max_tokens=4, temperature=0).tokens
