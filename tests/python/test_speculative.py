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
