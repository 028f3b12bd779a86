// kvstash._core: the compiled half of the Python package (kvstash/__init__.py is the other).
// kvstash::Error becomes the Python exception class of its ErrorCode (kvstash/errors.py).
#include <nanobind/nanobind.h>

#include <exception>

#include "kvstash/error.h"
#include "py_types.h"

namespace nb = nanobind;

namespace {

const char* error_class_name(kvstash::ErrorCode code) {
    switch (code) {
        case kvstash::ErrorCode::invalid_argument: return "InvalidArgument";
        case kvstash::ErrorCode::io: return "FileError";
        case kvstash::ErrorCode::bad_format: return "BadInputFile";
        case kvstash::ErrorCode::unsupported: return "Unsupported";
        case kvstash::ErrorCode::out_of_range: return "ContextOverflow";
        case kvstash::ErrorCode::internal: return "InternalError";
        case kvstash::ErrorCode::output: return "OutputError";
    }
    return "Error";
}

void translate_error(const std::exception_ptr& p, void*) {
    try {
        std::rethrow_exception(p);
    } catch (const kvstash::Error& e) {
        nb::object cls = nb::module_::import_("kvstash.errors").attr(error_class_name(e.code()));
        PyErr_SetString(cls.ptr(), e.what());
    }
}

}  // namespace

NB_MODULE(_core, m) {
    m.doc() = "kvstash's C++ engine (use the kvstash package, not this module directly)";
    nb::register_exception_translator(translate_error);
    kvstash::python::ModelClass model_class = kvstash::python::bind_model(m);
    kvstash::python::StateClass state_class = kvstash::python::bind_state(m);
    kvstash::python::bind_generate(m, model_class);
    kvstash::python::bind_session(m);
    kvstash::python::bind_adapters(m);
    kvstash::python::bind_batch(model_class);
    kvstash::python::bind_kv(model_class, state_class);
}
