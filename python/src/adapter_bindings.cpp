// kvstash.Adapters: LoRA files and control vectors loaded once for a model and chosen per State or
// Session (kvstash/adapter.h), as the CLI's --lora / --control-vector flags do.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "py_types.h"

namespace kvstash::python {

namespace {

// One file as Python gives it: a path (scale 1) or (path, scale).
AdapterFile adapter_file(const nb::handle& item, AdapterKind kind) {
    AdapterFile file;
    file.kind = kind;
    if (nb::isinstance<nb::str>(item)) {
        file.path = nb::cast<std::string>(item);
    } else {
        auto [path, scale] = nb::cast<std::pair<std::string, float>>(item);
        file.path = std::move(path);
        file.scale = scale;
    }
    return file;
}

std::shared_ptr<const AdapterSet> load_adapters(const PyModel& m, const nb::list& lora, const nb::list& control_vectors,
                                                std::optional<std::pair<int64_t, int64_t>> control_vector_layers) {
    std::vector<AdapterFile> files;
    for (nb::handle item : lora) files.push_back(adapter_file(item, AdapterKind::lora));
    for (nb::handle item : control_vectors) files.push_back(adapter_file(item, AdapterKind::control_vector));
    ControlVectorLayers layers;
    if (control_vector_layers) {
        if (control_vectors.size() == 0) {
            throw Error(ErrorCode::invalid_argument, "control_vector_layers needs control_vectors");
        }
        layers.first = control_vector_layers->first;
        layers.last = control_vector_layers->second;
    }
    std::shared_ptr<const AdapterSet> set;
    {
        nb::gil_scoped_release release;
        set = AdapterSet::load(m.model(), files, layers);
    }
    return set;
}

}  // namespace

std::shared_ptr<const AdapterSet> adapter_set_arg(const PyModel& model, const nb::handle& adapters) {
    if (!adapters.is_valid() || adapters.is_none()) return nullptr;
    const PyAdapters& py = nb::cast<const PyAdapters&>(adapters);
    if (&py.set->model() != &model.model()) {
        throw Error(ErrorCode::invalid_argument,
                    "these Adapters were loaded for another Model ('" + py.set->model().path() +
                        "'): load them with kvstash.Adapters(model, ...) for the model they are used with");
    }
    return py.set;
}

nb::str adapters_description(const std::shared_ptr<const AdapterSet>& set) {
    return nb::str(set ? set->describe().c_str() : "no adapters");
}

void bind_adapters(nb::module_& m) {
    nb::class_<PyAdapters>(m, "Adapters",
                           "LoRA files and control vectors (llama.cpp's GGUF formats) loaded once for a Model; "
                           "give them to State(..., adapters=), Model.prefill(..., adapters=), State.load(..., "
                           "adapters=) or Session(..., adapters=). A State is bound to its adapters: its files "
                           "load only under the same ones, and the prefix cache keeps them apart.")
        .def(
            "__init__",
            [](PyAdapters* self, nb::object model, const nb::list& lora, const nb::list& control_vectors,
               std::optional<std::pair<int64_t, int64_t>> control_vector_layers) {
                std::shared_ptr<const AdapterSet> set =
                    load_adapters(nb::cast<const PyModel&>(model), lora, control_vectors, control_vector_layers);
                new (self) PyAdapters{std::move(model), std::move(set)};
            },
            nb::arg("model"), nb::kw_only(), nb::arg("lora") = nb::list(), nb::arg("control_vectors") = nb::list(),
            nb::arg("control_vector_layers") = nb::none(),
            "lora / control_vectors: paths, or (path, scale) pairs (as --lora / --control-vector PATH[:SCALE]); "
            "control_vector_layers: (first, last) layers the vectors are added to (as "
            "--control-vector-layer-range). Raises FileError, BadInputFile, or InvalidArgument for an adapter "
            "made for another model.")
        .def_prop_ro("model", [](const PyAdapters& self) { return self.model_ref; })
        .def_prop_ro(
            "fingerprint", [](const PyAdapters& self) { return self.set->fingerprint(); },
            "32 hex digits identifying the set (each file's content, kind and scale, the layer range).")
        .def("__len__", [](const PyAdapters& self) { return self.set->files().size(); })
        .def("__repr__", [](const PyAdapters& self) { return "<kvstash.Adapters " + self.set->describe() + ">"; });
}

}  // namespace kvstash::python
