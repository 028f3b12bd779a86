"""Speculative decoding from Python (Model.complete / generate with speculative=...): the same tokens, text
and saved state as without it (docs/speculative.md)."""

import pytest

import kvstash

DOC = (
    "<|im_start|>user\nRepeat exactly: The quick brown fox jumps over the lazy dog near the river bank at dawn."
    "<|im_end|>\n<|im_start|>assistant\n"
)


def run(model, tmp_path, name, **kwargs):
    state = kvstash.State(model)
    completion = model.complete(state, DOC, 24, seed=5, **kwargs)
    path = tmp_path / f"{name}.kvs"
    state.save(str(path))
    return completion, path.read_bytes()


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_lookup_and_draft_change_no_bit(model, tmp_path, temperature):
    plain, plain_bytes = run(model, tmp_path, "plain", temperature=temperature)
    lookup, lookup_bytes = run(model, tmp_path, "lookup", temperature=temperature, speculative="lookup", spec_max=6)
    draft, draft_bytes = run(
        model, tmp_path, "draft", temperature=temperature, speculative="draft", draft_model=model, spec_max=4
    )
    for other, other_bytes in ((lookup, lookup_bytes), (draft, draft_bytes)):
        assert other.tokens == plain.tokens
        assert other.text == plain.text
        assert other_bytes == plain_bytes
        assert 0 <= other.accepted <= other.drafted
    assert plain.drafted == 0
    assert lookup.drafted > 0 and draft.accepted > 0


def test_bad_speculative_arguments(model):
    state = kvstash.State(model)
    with pytest.raises(kvstash.InvalidArgument):
        model.complete(state, "Hi", 2, speculative="medusa")
    with pytest.raises(kvstash.InvalidArgument):
        model.complete(state, "Hi", 2, speculative="draft")


def chat(model, tmp_path, name, **kwargs):
    """Three turns of a Session (the second asks to repeat the first reply: lookup finds it), each reply's
    Completion, and the session's saved file."""
    session = kvstash.Session(model, "You copy text exactly.", n_ctx=512, use_cache=False)
    turns = [
        session.complete(DOC_SENTENCE, 20, seed=11, **kwargs),
        session.complete("Say that sentence again, word for word.", 24, **kwargs),
        session.complete("Once more, please.", 16, **{**kwargs, "temperature": 0.0}),
    ]
    path = tmp_path / f"{name}.kvs"
    session.save(str(path))
    return turns, path.read_bytes()


DOC_SENTENCE = "Repeat exactly: The quick brown fox jumps over the lazy dog near the river bank at dawn."


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_session_reply_speculative_changes_no_bit(model, tmp_path, temperature):
    plain, plain_bytes = chat(model, tmp_path, "plain", temperature=temperature)
    lookup, lookup_bytes = chat(model, tmp_path, "lookup", temperature=temperature, speculative="lookup", spec_max=6)
    draft, draft_bytes = chat(
        model, tmp_path, "draft", temperature=temperature, speculative="draft", draft_model=model, spec_max=4
    )
    for other, other_bytes in ((lookup, lookup_bytes), (draft, draft_bytes)):
        for turn, plain_turn in zip(other, plain):
            assert turn.tokens == plain_turn.tokens
            assert turn.text == plain_turn.text
            assert turn.stop_reason == plain_turn.stop_reason
            assert 0 <= turn.accepted <= turn.drafted
        assert other_bytes == plain_bytes
    assert all(turn.drafted == 0 for turn in plain)
    assert sum(turn.drafted for turn in lookup) > 0
    assert sum(turn.accepted for turn in draft) > 0


def test_session_reply_speculative_text_and_bad_arguments(model):
    session = kvstash.Session(model, "You copy text exactly.", n_ctx=512, use_cache=False)
    plain = kvstash.Session(model, "You copy text exactly.", n_ctx=512, use_cache=False)
    assert session.reply(DOC_SENTENCE, 16, temperature=0.0, speculative="lookup") == plain.reply(
        DOC_SENTENCE, 16, temperature=0.0
    )
    with pytest.raises(kvstash.InvalidArgument):
        session.reply("Hi", 2, speculative="medusa")
    with pytest.raises(kvstash.InvalidArgument):
        session.reply("Hi", 2, speculative="draft")
    with pytest.raises(kvstash.InvalidArgument):
        session.reply("Hi", 2, draft_model=model)
