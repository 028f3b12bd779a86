"""The API over include/kvstash/*.h: tokenizer, State (fork, truncate, zero-copy logits, files), eval,
generate (text, stream, callback), errors by kind."""

import os

import numpy as np
import pytest

import kvstash

PROMPT = "The quick brown fox jumps over the lazy dog. The capital of France is"


def test_tokenize_roundtrip(model):
    ids = model.tokenize("Hello, world!", add_special=False)
    assert ids and all(isinstance(i, int) for i in ids)
    assert model.detokenize(ids) == "Hello, world!"
    assert model.detokenize_bytes(ids) == b"Hello, world!"
    assert model.info["architecture"] == "llama"
    assert model.n_vocab == len(np.asarray(model.prefill("Hi").logits))


def test_logits_zero_copy_and_stable(model):
    state = kvstash.State(model)
    assert state.logits.shape == (0,)
    model.eval(state, model.tokenize(PROMPT))
    a = state.logits
    b = state.logits
    assert a.dtype == np.float32 and not a.flags.writeable
    assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0]  # one buffer, no copy
    kept = a.copy()
    model.eval(state, [int(np.argmax(a))])  # the State moves on; `a` must stay valid and unchanged
    assert np.array_equal(a, kept)
    assert not np.array_equal(state.logits, kept)
    del state
    assert np.array_equal(a, kept)  # outlives its State too


def test_eval_is_batch_invariant(model):
    ids = model.tokenize(PROMPT)
    whole = kvstash.State(model)
    rows = model.eval(whole, ids, all_logits=True)
    assert rows.shape == (len(ids), model.n_vocab)
    split = kvstash.State(model)
    for i in range(0, len(ids), 3):
        model.eval(split, ids[i : i + 3])
    assert np.array_equal(whole.logits, split.logits)
    assert np.array_equal(rows[-1], whole.logits)


def test_fork_and_truncate(model):
    base = model.prefill(PROMPT)
    n = len(base)
    fork = base.fork()
    a = model.generate(fork, max_tokens=8, temperature=0)
    assert len(base) == n and len(fork) > n
    again = model.generate(base.fork(), max_tokens=8, temperature=0)
    assert a == again
    fork.truncate(n)
    assert fork.tokens == base.tokens
    assert model.generate(fork, max_tokens=8, temperature=0) == a  # logits of position n-1 recomputed


def test_generate_matches_manual_greedy_loop(model):
    state = model.prefill(PROMPT)
    manual = state.fork()
    c = model.complete(state, max_tokens=10, temperature=0, stop_at_eog=False)
    ids = []
    for _ in range(10):
        tok = int(np.argmax(manual.logits))
        ids.append(tok)
        model.eval(manual, [tok])
    assert c.tokens == ids
    assert c.stop_reason == "max_tokens"
    assert np.array_equal(state.logits, manual.logits)


def test_stream_and_callback(model):
    base = model.prefill(PROMPT)
    text = model.generate(base.fork(), max_tokens=12, temperature=0.7, seed=5)
    pieces = list(model.generate(base.fork(), max_tokens=12, temperature=0.7, seed=5, stream=True))
    assert "".join(pieces) == text and len(pieces) > 1
    seen = []
    c = model.complete(base.fork(), max_tokens=50, temperature=0, callback=lambda t, s: seen.append(t) or len(seen) < 3)
    assert c.stop_reason == "callback" and len(c.tokens) == 3
    stream = model.generate_iter(base.fork(), max_tokens=50, temperature=0)
    first = next(stream)
    stream.close()  # stops generation early
    assert first and stream.completion.stop_reason == "callback"


def test_callback_exception_propagates(model):
    def boom(token, text):
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        model.generate(model.prefill("Hi"), max_tokens=5, callback=boom)


def test_stop_strings_and_seed(model):
    base = model.prefill(PROMPT)
    a = model.generate(base.fork(), max_tokens=16, temperature=1.0, seed=42)
    b = model.generate(base.fork(), max_tokens=16, temperature=1.0, seed=42)
    assert a == b
    c = model.complete(base.fork(), " Paris. Paris. Paris.", max_tokens=4, temperature=0, stop=["."])
    assert "." not in c.text


def test_save_load_roundtrip(model, tmp_path):
    state = model.prefill(PROMPT)
    path = tmp_path / "p.kvs"
    state.save(str(path))
    info = kvstash.file_info(str(path), verify=True)
    assert info["n_tokens"] == len(state) and info["checksums_ok"]
    loaded = kvstash.State.load(model, str(path))
    assert loaded.tokens == state.tokens
    assert np.array_equal(loaded.logits, state.logits)
    assert model.generate(loaded, max_tokens=8, temperature=0) == model.generate(state, max_tokens=8, temperature=0)
    q8 = tmp_path / "q8.kvs"
    model.prefill(PROMPT).save(str(q8), kv_type="q8_0")
    assert kvstash.file_info(str(q8))["lossy_kv"]


def test_errors_by_kind(model, tmp_path):
    bad = tmp_path / "bad.kvs"
    bad.write_bytes(b"not a state file at all" * 10)
    with pytest.raises(kvstash.BadInputFile):
        kvstash.State.load(model, str(bad))
    with pytest.raises(kvstash.FileError):
        kvstash.State.load(model, str(tmp_path / "missing.kvs"))
    with pytest.raises(kvstash.FileError):
        kvstash.Model(str(tmp_path / "missing.gguf"))
    small = kvstash.State(model, n_ctx=8)
    with pytest.raises(kvstash.ContextOverflow):
        model.eval(small, list(range(100, 120)))
    assert len(small) == 0  # unchanged when it raises
    with pytest.raises(kvstash.InvalidArgument):
        model.eval(kvstash.State(model), [model.n_vocab + 5])
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
        kvstash.State(model, kv_type="q4")
    assert issubclass(kvstash.ModelMismatch, kvstash.Error)


def test_model_mismatch(model, tiny_model, tmp_path):
    path = tmp_path / "tiny.kvs"
    s = kvstash.State(tiny_model)
    tiny_model.eval(s, [1, 2, 3])
    s.save(str(path))
    with pytest.raises(kvstash.ModelMismatch, match="another model"):
        kvstash.State.load(model, str(path))


def test_prefix_cache(tmp_path):
    from conftest import model_path

    m = kvstash.Model(model_path(), threads=2, cache_ram=64 << 20, cache_dir=str(tmp_path / "cache"))
    system = "You are a helpful assistant. " * 20
    a = m.prefill(system + "Question one?")
    b = m.prefill(system + "Question two?")
    stats = m.cache_stats()
    assert stats["tokens_reused"] >= 64 and stats["disk_blocks_written"] > 0
    cold = kvstash.Model(model_path(), threads=2).prefill(system + "Question two?")
    assert np.array_equal(b.logits, cold.logits)  # bit-exact with a cache hit
    assert len(a) > 0


def test_session_undo_save_open(model, tmp_path):
    chat = kvstash.Session(model, "You are terse.")
    first = chat.reply("Say hi.", max_tokens=12, temperature=0)
    chat.reply("And bye?", max_tokens=12, temperature=0)
    assert chat.last_turn["reused"] > 0
    assert chat.undo()
    assert len(chat.messages) == 3  # system, user, assistant
    path = tmp_path / "chat.kvs"
    chat.save(str(path))
    resumed = kvstash.Session.open(model, str(path))
    assert resumed.messages == chat.messages
    assert resumed.reply("And bye?", max_tokens=12, temperature=0) == chat.reply("And bye?", max_tokens=12, temperature=0)
    assert first
    streamed = "".join(chat.reply("Once more?", max_tokens=8, temperature=0, stream=True))
    assert isinstance(streamed, str)


def test_logits_array_outlives_state_and_model():
    import gc

    from conftest import model_path

    m = kvstash.Model(model_path(), threads=1)
    s = m.prefill("Hello there")
    a = s.logits
    kept = a.copy()
    m.eval(s, [int(np.argmax(a))])  # the array now owns the old State, which needs the model
    del s, m
    gc.collect()
    assert np.array_equal(a, kept)
