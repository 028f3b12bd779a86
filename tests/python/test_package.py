"""The package as a user meets it (issue 33 items 6 and 7): `import kvstash` exposes its API and nothing
else (no typing names), the Hugging Face cache interop refuses a model with recurrent layers by name
instead of returning a cache transformers then rejects, and Hugging Face directories of the recurrent
families load as their GGUFs."""

import numpy as np
import pytest

import kvstash
from kvstash import interop
from conftest import ROOT

RECURRENT = ROOT / "tests" / "fixtures" / "recurrent"


def test_namespace_is_the_api():
    public = {name for name in dir(kvstash) if not name.startswith("_")}
    assert not public & {"List", "Optional", "Sequence", "Tuple", "Union", "Prompt", "annotations"}, public
    modules = {"errors", "interop"}  # submodules appear once imported
    assert public - modules <= set(kvstash.__all__), public - set(kvstash.__all__)
    for name in kvstash.__all__:
        assert hasattr(kvstash, name), name


@pytest.mark.parametrize("name", ["granitehybrid_f32.gguf", "mamba2_f32.gguf"])
def test_dynamic_cache_of_a_recurrent_model_is_refused_by_name(name):
    model = kvstash.Model(str(RECURRENT / name), threads=1)
    state = model.prefill([1, 2, 3, 4])
    with pytest.raises(kvstash.Unsupported, match="recurrent") as error:
        interop.to_dynamic_cache(state)  # before importing torch: refused even where it is not installed
    assert model.info["architecture"] in str(error.value)
    with pytest.raises(kvstash.Unsupported, match="recurrent"):
        interop.state_from_kv(model, [1, 2], [])
    # The attention layers' K/V are still readable (a hybrid's few attention layers; none for Mamba 2).
    layers = interop.kv_layers(state)
    assert len(layers) == model.info["n_kv_layers"]
    assert all(k.shape[0] == 4 and np.isfinite(k).all() for k, _ in layers)


@pytest.mark.parametrize("name", ["mamba1_f32", "mamba2_f32", "granitehybrid_f32"])
def test_hugging_face_directories_of_recurrent_families_load(name):
    """MambaForCausalLM, Mamba2ForCausalLM, GraniteMoeHybridForCausalLM directories (written back from the
    recurrent fixtures by tests/reference/make_hf_recurrent_dirs.py) run as their GGUFs do."""
    directory = kvstash.Model(str(ROOT / "tests" / "fixtures" / "hf" / name), threads=1)
    gguf = kvstash.Model(str(RECURRENT / (name + ".gguf")), threads=1)
    assert directory.info["architecture"] == gguf.info["architecture"]
    tokens = [5, 17, 42, 99, 123, 7, 250, 1]
    ours = directory.eval(kvstash.State(directory, n_ctx=64), tokens, all_logits=True)
    theirs = gguf.eval(kvstash.State(gguf, n_ctx=64), tokens, all_logits=True)
    assert np.max(np.abs(ours - theirs)) <= 1e-5 * np.max(np.abs(theirs))
    assert directory.generate(directory.prefill(tokens), max_tokens=8, temperature=0) == gguf.generate(
        gguf.prefill(tokens), max_tokens=8, temperature=0
    )
