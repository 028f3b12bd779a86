// Building gguf::Value metadata in memory, with the value types llama.cpp's converter (gguf-py's GGUFWriter)
// writes: uint32 counts and ids, float32 reals, bool flags, strings, and arrays of them. Used to read a Hugging
// Face model directory as the GGUF the converter would make of it (so that the fingerprint hashes equal values).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "format/gguf.h"

namespace kvstash::gguf {

using Metadata = std::vector<std::pair<std::string, Value>>;

inline Value u32_value(uint32_t x) {
    Value v;
    v.type = ValueType::UINT32;
    v.integer = x;
    v.uinteger = x;
    return v;
}

inline Value i32_value(int32_t x) {
    Value v;
    v.type = ValueType::INT32;
    v.integer = x;
    v.uinteger = static_cast<uint64_t>(static_cast<int64_t>(x));
    return v;
}

// Rounded to float32 first, as the file would store it.
inline Value f32_value(double x) {
    Value v;
    v.type = ValueType::FLOAT32;
    v.real = static_cast<double>(static_cast<float>(x));
    return v;
}

inline Value bool_value(bool x) {
    Value v;
    v.type = ValueType::BOOL;
    v.integer = x ? 1 : 0;
    v.uinteger = x ? 1 : 0;
    return v;
}

inline Value string_value(std::string s) {
    Value v;
    v.type = ValueType::STRING;
    v.string = std::move(s);
    return v;
}

inline Value array_value(ValueType element_type, std::vector<Value> elements) {
    Value v;
    v.type = ValueType::ARRAY;
    v.array_type = element_type;
    v.array = std::move(elements);
    return v;
}

}  // namespace kvstash::gguf
