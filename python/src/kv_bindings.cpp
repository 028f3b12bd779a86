// A State's KV cache to and from NumPy (kvstash/interop.py builds per-layer views and transformers'
// DynamicCache on these). Reads the cache's blocks through the library's internal access headers, as the
// state-file writer does: the public API has no per-layer KV view, and this binding is built in-tree.
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>

#include "kv/kv_block_staging.h"
#include "kv/kv_cache.h"
#include "kvstash/error.h"
#include "model/model_access.h"
#include "py_types.h"
#include "state/state_access.h"

namespace kvstash::python {

namespace {

using KvArray = nb::ndarray<nb::numpy, nb::ndim<3>, nb::c_contig>;

// The dtype of a KV row element as NumPy sees it.
nb::dlpack::dtype kv_dtype(KvType type) {
    return type == KvType::f32 ? nb::dtype<float>() : nb::dlpack::dtype{uint8_t(nb::dlpack::dtype_code::Float), 16, 1};
}

// K (or V) of every attention layer: [n_kv_layers, n_evaluated_tokens, n_head_kv * head_dim], the State's
// element type (f16 or f32), as kvstash computed it (post-RoPE keys, the GGUF rotation layout).
nb::object export_half(const State& state, bool values) {
    const KvCache& kv = StateAccess::kv(state);
    if (kv.kv_type() == KvType::q8_0) {  // 34-byte blocks: no numpy element type to give them
        throw Error(ErrorCode::invalid_argument, "the KV of a q8_0 cache cannot be exported (f16 or f32 only)");
    }
    // A sliding-window model's State keeps only the window for those layers (StateOptions::
    // trim_sliding_window): the older rows no longer exist to export.
    if (kv.n_trimmed_blocks() > 0) {
        throw Error(ErrorCode::invalid_argument,
                    "this State's sliding-window layers hold only their window (" +
                        std::to_string(kv.n_trimmed_blocks()) +
                        " leading KV blocks were trimmed); export the KV of a State before it grows past twice the "
                        "window");
    }
    const int64_t n_layer = kv.n_layer();
    const int64_t n_tokens = kv.n_tokens();
    const size_t row = kv.row_bytes();
    auto* data = new std::vector<uint8_t>(static_cast<size_t>(n_layer * n_tokens) * row);
    KvBlockStaging staging;  // each block half read once, as host bytes
    for (int64_t block = 0; block < kv.n_blocks(); ++block) {
        const uint8_t* base = staging.read(kv.block(block), values ? KvHalf::values : KvHalf::keys).data();
        const int64_t first = block * kv_block_tokens;
        const int64_t count = std::min<int64_t>(kv_block_tokens, n_tokens - first);
        for (int64_t layer = 0; layer < n_layer; ++layer) {
            for (int64_t t = 0; t < count; ++t) {
                const uint8_t* src = base + static_cast<size_t>(layer * kv_block_tokens + t) * row;
                std::memcpy(data->data() + static_cast<size_t>(layer * n_tokens + first + t) * row, src, row);
            }
        }
    }
    nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<uint8_t>*>(p); });
    const size_t shape[3] = {static_cast<size_t>(n_layer), static_cast<size_t>(n_tokens),
                             static_cast<size_t>(kv.n_embd_kv())};
    return nb::cast(KvArray(data->data(), 3, shape, owner, nullptr, kv_dtype(kv.kv_type())));
}

// A State holding `tokens` with the given K and V ([n_kv_layers, len(tokens), n_embd_kv], contiguous, of
// the State's element type) and no logits: evaluate at least one more token before sampling. Its KV is
// marked inexact (not computed by kvstash), so the prefix cache never takes it.
PyState* import_kv(nb::object model_obj, const std::vector<int32_t>& tokens, KvArray keys, KvArray values,
                   const std::string& kv_type, int64_t n_ctx) {
    PyModel& m = nb::cast<PyModel&>(model_obj);
    const ModelInfo& info = m.model().info();
    if (info.n_recurrent_layers > 0) {
        throw Error(ErrorCode::unsupported, "KV import: models with recurrent layers also need their recurrent state");
    }
    std::optional<KvType> type = parse_kv_type(kv_type);
    if (!type || *type == KvType::q8_0) throw Error(ErrorCode::invalid_argument, "kv_type must be f16 or f32");
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (const KvArray* a : {&keys, &values}) {
        if (a->shape(0) != static_cast<size_t>(info.n_kv_layers) || a->shape(1) != static_cast<size_t>(n) ||
            a->shape(2) != static_cast<size_t>(info.n_embd_kv()) || a->dtype() != kv_dtype(*type)) {
            throw Error(ErrorCode::invalid_argument,
                        "KV import: keys and values must be [" + std::to_string(info.n_kv_layers) + ", " +
                            std::to_string(n) + ", " + std::to_string(info.n_embd_kv()) + "] arrays of " + kv_type);
        }
    }
    State state(m.model(), StateOptions{.kv_type = *type, .n_ctx = n_ctx});
    if (n > state.n_ctx()) throw Error(ErrorCode::out_of_range, "KV import: more tokens than the context holds");
    for (int32_t t : tokens) {
        if (t < 0 || t >= info.n_vocab) throw Error(ErrorCode::invalid_argument, "KV import: token id out of range");
    }
    KvCache& kv = StateAccess::grow(state, n);
    const size_t row = kv.row_bytes();
    const auto* k = static_cast<const uint8_t*>(keys.data());
    const auto* v = static_cast<const uint8_t*>(values.data());
    for (int64_t layer = 0; layer < info.n_kv_layers; ++layer) {
        for (int64_t pos = 0; pos < n; ++pos) {
            const size_t offset = static_cast<size_t>(layer * n + pos) * row;
            std::memcpy(kv.k_row(layer, pos), k + offset, row);
            std::memcpy(kv.v_row(layer, pos), v + offset, row);
        }
    }
    StateAccess::commit(state, tokens, {}, {});
    StateAccess::set_kv_exact(state, false);
    return new PyState(model_obj, m, std::move(state));
}

}  // namespace

void bind_kv(ModelClass& model_class, StateClass& state_class) {
    state_class
        .def(
            "_kv_export", [](const PyState& self, bool values) { return export_half(self.get(), values); },
            nb::arg("values"),
            "K (values=False) or V of every attention layer: [n_kv_layers, n_tokens, n_head_kv * head_dim], "
            "float16 or float32 as stored (a copy; K in the GGUF rotation layout).")
        .def_static("_kv_import", &import_kv, nb::arg("model"), nb::arg("tokens"), nb::arg("keys"), nb::arg("values"),
                    nb::arg("kv_type") = "f32", nb::arg("n_ctx") = 0,
                    "A State from K and V arrays as _kv_export gives them (no logits: eval a token next).");
    model_class.def_prop_ro(
        "_rope",
        [](const PyModel& self) {
            const RopeParams& rope = ModelAccess::impl(self.model()).config.rope;
            return std::make_pair(std::string(rope.layout == RopeLayout::neox ? "neox" : "normal"), rope.n_rot);
        },
        "(layout, n_rot) of the model's RoPE: \"normal\" (GGUF llama: adjacent pairs) or \"neox\".");
}

}  // namespace kvstash::python
