#include "kvstash/kv_type.h"

namespace kvstash {

std::string_view kv_type_name(KvType type) {
    switch (type) {
        case KvType::f16: return "f16";
        case KvType::f32: return "f32";
        case KvType::q8_0: return "q8_0";
    }
    return "?";
}

std::optional<KvType> parse_kv_type(std::string_view name) {
    for (KvType type : {KvType::f16, KvType::f32, KvType::q8_0}) {
        if (name == kv_type_name(type)) return type;
    }
    return std::nullopt;
}

}  // namespace kvstash
