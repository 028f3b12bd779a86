"""The package as a user meets it (issue 33 items 6 and 7): `import kvstash` exposes its API and nothing
else (no typing names), and the Hugging Face cache interop refuses a model with recurrent layers by name
instead of returning a cache transformers then rejects."""

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
