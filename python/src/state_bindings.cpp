// kvstash.State: fork, truncate, tokens, zero-copy logits, state files.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "kvstash/state_file.h"
#include "py_types.h"
#include "state/adapter_fingerprint.h"

namespace kvstash::python {

PyState::PyState(nb::object model_ref, PyModel& model, State state)
    : model_ref_(std::move(model_ref)), model_(&model), state_(std::make_unique<State>(std::move(state))) {}

PyState::~PyState() {
    // Live logits arrays view this State's buffer: hand the State to them.
    if (exported_ && exported_.use_count() > 1) exported_->detached = std::move(state_);
}

State& PyState::mutate() {
    if (exported_) {
        if (exported_.use_count() > 1) {
            // Arrays still view the logits buffer: they keep this State (KV blocks shared, copy-on-write);
            // we go on with a fork of it.
            auto next = std::make_unique<State>(state_->fork());
            exported_->detached = std::move(state_);
            state_ = std::move(next);
        }
        exported_.reset();
    }
    return *state_;
}

nb::object PyState::logits_array() {
    std::span<const float> logits = state_->last_logits();
    if (!exported_) exported_ = std::make_shared<LogitsOwner>(LogitsOwner{model_ref_, nullptr});
    auto* keep = new std::shared_ptr<LogitsOwner>(exported_);
    nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<LogitsOwner>*>(p); });
    nb::ndarray<nb::numpy, const float, nb::ndim<1>> array(logits.data(), {logits.size()}, owner);
    return nb::cast(array, nb::rv_policy::reference);
}

PyState::Busy::Busy(PyState& state) : state_(state) {
    if (state_.busy_.exchange(true)) {
        throw Error(ErrorCode::invalid_argument,
                    "this State is in use by another thread: give each thread its own State (State.fork())");
    }
}

namespace {

std::optional<KvType> parse_file_kv_type(const std::optional<std::string>& name) {
    if (!name) return std::nullopt;
    std::optional<KvType> type = parse_kv_type(*name);
    if (!type)
        throw Error(ErrorCode::invalid_argument, "kv_type must be \"f16\", \"f32\" or \"q8_0\", not \"" + *name + "\"");
    return type;
}

KvType parse_state_kv_type(const std::string& name) {
    std::optional<KvType> type = parse_kv_type(name);
    if (!type) {
        throw Error(ErrorCode::invalid_argument,
                    "a State's kv_type must be \"f16\", \"f32\" or \"q8_0\", not \"" + name + "\"");
    }
    return *type;
}

nb::dict file_info_dict(const StateFileInfo& info) {
    nb::dict d;
    d["format_version"] = info.format_version;
    d["model_fingerprint"] = info.model_fingerprint;
    d["model_name"] = info.model_name;
    d["n_tokens"] = info.n_tokens;
    d["n_ctx"] = info.n_ctx;
    d["kv_type"] = std::string(kv_type_name(info.kv_type));
    d["lossy_kv"] = info.lossy_kv;
    d["numerics"] = info.numerics;
    d["exact_here"] = info.exact_here;
    d["compressed"] = info.compressed;
    d["has_logits"] = info.has_logits;
    d["has_sampler"] = info.has_sampler;
    d["has_session"] = info.has_session;
    d["file_bytes"] = info.file_bytes;
    d["kv_bytes"] = info.kv_bytes;
    d["checksums_ok"] = info.checksums_ok;
    return d;
}

[[noreturn]] void raise_mismatch(const char* error_class, const std::string& message) {
    nb::object cls = nb::module_::import_("kvstash.errors").attr(error_class);
    PyErr_SetString(cls.ptr(), message.c_str());
    throw nb::python_error();
}

// Refuses a file of another model with ModelMismatch before reading it (the C++ loader says
// invalid_argument; Python users want the kind), and this model's file saved under other adapters with
// AdapterMismatch (a ModelMismatch) saying so, as the CLI does: the model is right, the weights are not.
void check_fingerprint(const PyModel& m, const std::string& path, const AdapterSet* adapters) {
    StateFileInfo info = inspect_state_file(path, Checksums::skip);
    std::string ours = model_fingerprint(m.model());
    const bool saved_with_adapters = !info.base_model_fingerprint.empty();
    const std::string& saved_base = saved_with_adapters ? info.base_model_fingerprint : info.model_fingerprint;
    if (saved_base != ours) {
        raise_mismatch("ModelMismatch", "state file '" + path + "' belongs to another model (fingerprint " +
                                            saved_base + ", model '" + info.model_name + "'), not to '" +
                                            m.model().path() + "' (fingerprint " + ours + ")");
    }
    const std::string expected = combined_fingerprint(m.model(), adapters).hex();
    if (info.model_fingerprint != expected) {
        const bool with_adapters = adapters != nullptr && !adapters->empty();
        raise_mismatch(
            "AdapterMismatch",
            "state file '" + path + "' was saved " +
                (saved_with_adapters ? "under adapters (model + adapters fingerprint " + info.model_fingerprint + ")"
                                     : std::string("without adapters")) +
                ", but is being loaded " +
                (with_adapters ? "under " + adapters->describe() + " (fingerprint " + expected + ")"
                               : std::string("without adapters")) +
                "; its KV was computed with other weights: load it under the adapters it was saved with "
                "(adapters=kvstash.Adapters(model, lora=..., control_vectors=...))");
    }
}

PyState* load(nb::object model_obj, const std::string& path, std::shared_ptr<const AdapterSet> adapters) {
    PyModel& m = nb::cast<PyModel&>(model_obj);
    std::optional<State> state;
    {
        nb::gil_scoped_release release;
        state.emplace(load_state(m.model(), path, LoadOptions{std::move(adapters)}));
    }
    return new PyState(model_obj, m, std::move(*state));
}

}  // namespace

void check_state_file_model(const PyModel& m, const std::string& path, const AdapterSet* adapters) {
    check_fingerprint(m, path, adapters);
}

StateClass bind_state(nb::module_& m) {
    StateClass state_class(m, "State",
                           "One sequence: its tokens, their KV cache and the last position's logits. Use a State "
                           "from one thread at a time; fork() it for another thread (O(1), copy-on-write).");
    state_class
        .def(
            "__init__",
            [](PyState* self, nb::object model, int64_t n_ctx, const std::string& kv_type, nb::object adapters) {
                PyModel& m = nb::cast<PyModel&>(model);
                StateOptions options{.kv_type = parse_state_kv_type(kv_type), .n_ctx = n_ctx};
                options.adapters = adapter_set_arg(m, adapters);
                new (self) PyState(model, m, State(m.model(), options));
            },
            nb::arg("model"), nb::arg("n_ctx") = 0, nb::arg("kv_type") = "f16", nb::kw_only(),
            nb::arg("adapters") = nb::none(),
            "An empty State. n_ctx: maximum tokens (0 = the model's training context); kv_type: \"f16\" or "
            "\"f32\"; adapters: a kvstash.Adapters every token of this State (and its forks) is computed under.")
        .def_prop_ro(
            "adapters", [](const PyState& self) { return adapters_description(self.get().adapters()); },
            "What the State is computed under: \"lora a.gguf ×0.8, control-vector b.gguf ×1\" or \"no adapters\".")
        .def_prop_ro(
            "model", [](const PyState& self) { return self.model_ref(); }, "The Model this State belongs to.")
        .def(
            "fork", [](PyState& self) { return new PyState(self.model_ref(), self.model(), self.get().fork()); },
            "A new State sharing this one's KV blocks (copy-on-write): O(1) in the prefix length.")
        .def(
            "truncate",
            [](PyState& self, int64_t n) {
                PyState::Busy busy(self);
                self.mutate().truncate(n);
            },
            nb::arg("n"), "Rewinds to the first n tokens (their logits are recomputed by the next eval).")
        .def_prop_ro(
            "tokens",
            [](const PyState& self) {
                std::span<const int32_t> t = self.get().tokens();
                return std::vector<int32_t>(t.begin(), t.end());
            },
            "The token ids of the sequence (a copy).")
        .def_prop_ro("n_tokens", [](const PyState& self) { return self.get().n_tokens(); })
        .def("__len__", [](const PyState& self) { return self.get().n_tokens(); })
        .def_prop_ro("n_ctx", [](const PyState& self) { return self.get().n_ctx(); })
        .def_prop_ro("kv_type", [](const PyState& self) { return std::string(kv_type_name(self.get().kv_type())); })
        .def_prop_ro("kv_bytes", [](const PyState& self) { return self.get().kv_bytes(); })
        .def_prop_ro("logits", &PyState::logits_array,
                     "The last position's logits: a read-only float32 NumPy array of n_vocab viewing the "
                     "State's own buffer (no copy); empty before the first eval. It stays valid (and "
                     "unchanged) after the State moves on.")
        .def_prop_ro(
            "info",
            [](const PyState& self) {
                nb::dict d;
                d["n_tokens"] = self.get().n_tokens();
                d["n_ctx"] = self.get().n_ctx();
                d["kv_type"] = std::string(kv_type_name(self.get().kv_type()));
                d["kv_bytes"] = self.get().kv_bytes();
                d["recurrent_bytes"] = self.get().recurrent_bytes();
                d["has_logits"] = !self.get().last_logits().empty();
                d["has_sampler"] = self.get().sampler_state() != nullptr;
                return d;
            },
            "A summary: n_tokens, n_ctx, kv_type, kv_bytes, ...")
        .def(
            "save",
            [](PyState& self, const std::string& path, std::optional<std::string> kv_type, bool compress) {
                SaveOptions options{.file_kv_type = parse_file_kv_type(kv_type), .compress = compress};
                PyState::Busy busy(self);
                nb::gil_scoped_release release;
                save_state(self.get(), path, options);
            },
            nb::arg("path"), nb::arg("kv_type") = nb::none(), nb::arg("compress") = false,
            "Writes the State to `path` atomically, bound to the model by fingerprint. kv_type=\"q8_0\" "
            "halves the file but continuation is then no longer bit-exact; compress: zstd.")
        .def_static(
            "load",
            [](nb::object model, const std::string& path, nb::object adapters) {
                PyModel& m = nb::cast<PyModel&>(model);
                std::shared_ptr<const AdapterSet> set = adapter_set_arg(m, adapters);
                check_fingerprint(m, path, set.get());
                return load(model, path, std::move(set));
            },
            nb::arg("model"), nb::arg("path"), nb::kw_only(), nb::arg("adapters") = nb::none(),
            "A State read from a file saved by State.save (in any process): continues bit-exactly. Raises "
            "ModelMismatch for a file of another model, AdapterMismatch (a ModelMismatch) for one saved under "
            "other adapters than `adapters`, BadInputFile for a corrupt one, FileError when it cannot be read.")
        .def("__repr__", [](const PyState& self) {
            return "<kvstash.State n_tokens=" + std::to_string(self.get().n_tokens()) +
                   " n_ctx=" + std::to_string(self.get().n_ctx()) +
                   " kv_type=" + std::string(kv_type_name(self.get().kv_type())) + ">";
        });

    m.def(
        "file_info",
        [](const std::string& path, bool verify) {
            return file_info_dict(inspect_state_file(path, verify ? Checksums::verify : Checksums::skip));
        },
        nb::arg("path"), nb::arg("verify") = false,
        "A state file's header (model fingerprint, tokens, KV type, sizes) without loading the model; "
        "verify=True also checks every section's checksum.");
    return state_class;
}

}  // namespace kvstash::python
