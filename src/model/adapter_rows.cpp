#include "model/adapter_rows.h"

#include <vector>

namespace kvstash {

bool any_lora(std::span<const AdapterRows> ranges) {
    for (const AdapterRows& r : ranges) {
        if (r.set != nullptr && r.set->has_lora) return true;
    }
    return false;
}

bool any_control(std::span<const AdapterRows> ranges) {
    for (const AdapterRows& r : ranges) {
        if (r.set == nullptr) continue;
        for (const std::vector<float>& v : r.set->control) {
            if (!v.empty()) return true;
        }
    }
    return false;
}

}  // namespace kvstash
