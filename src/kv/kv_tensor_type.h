// KvType (the public name of a KV representation) <-> TensorType (the GGML element type of its rows: what
// the kernels read and what a state file's meta records, same numbers as GGUF). The one place that maps them.
#pragma once

#include "format/tensor_type.h"
#include "kvstash/error.h"
#include "kvstash/kv_type.h"

namespace kvstash {

inline TensorType tensor_type_of(KvType type) {
    switch (type) {
        case KvType::f16: return TensorType::F16;
        case KvType::f32: return TensorType::F32;
        case KvType::q8_0: return TensorType::Q8_0;
    }
    throw Error(ErrorCode::internal, "tensor_type_of: not a KvType");
}

// Error(internal) for a TensorType that is no KV representation (callers check the file first).
inline KvType kv_type_of(TensorType type) {
    switch (type) {
        case TensorType::F16: return KvType::f16;
        case TensorType::F32: return KvType::f32;
        case TensorType::Q8_0: return KvType::q8_0;
        default: break;
    }
    throw Error(ErrorCode::internal,
                "kv_type_of: " + std::string(tensor_type_name(static_cast<uint32_t>(type))) + " is not a KV type");
}

}  // namespace kvstash
