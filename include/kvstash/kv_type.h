// The element type of KV data, wherever it lives: a State's cache (f16, f32 or q8_0), a state file's KV
// section (the State's type, or q8_0 to halve the file of an f16/f32 cache), a prefix-cache block. One name per type
// for every frontend ("f16", "f32", "q8_0").
#pragma once

#include <optional>
#include <string_view>

namespace kvstash {

enum class KvType {
    f16,  // the default cache type
    f32,  // twice the memory of f16
    // ggml's 8-bit blocks (32 values: f16 scale + 32 int8), 34 bytes per 32 values, about half of f16.
    // As a cache type (head_dim a multiple of 32): rows quantized once when written, exact in state files.
    // As a state file's storage type for an f16/f32 cache: loads back into f16/f32 NOT bit-exactly.
    q8_0,
};

// "f16", "f32", "q8_0".
std::string_view kv_type_name(KvType type);
// The inverse of kv_type_name; nullopt for any other text.
std::optional<KvType> parse_kv_type(std::string_view name);

}  // namespace kvstash
