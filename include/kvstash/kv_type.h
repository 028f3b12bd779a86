// The element type of KV data, wherever it lives: a State's cache (f16 or f32), a state file's KV
// section (the State's type, or q8_0 to halve the file), a prefix-cache block. One name per type for
// every frontend ("f16", "f32", "q8_0").
#pragma once

#include <optional>
#include <string_view>

namespace kvstash {

enum class KvType {
    f16,   // the default cache type
    f32,   // twice the memory of f16
    q8_0,  // 8-bit blocks (state files only): about half of f16, loads back into f16/f32 NOT bit-exactly
};

// "f16", "f32", "q8_0".
std::string_view kv_type_name(KvType type);
// The inverse of kv_type_name; nullopt for any other text.
std::optional<KvType> parse_kv_type(std::string_view name);

}  // namespace kvstash
