#include "backends/cpu/adapters/control_vector.h"

#include <vector>

namespace kvstash {

void apply_control(std::span<const AdapterRows> ranges, int64_t layer, float* x, int64_t n_embd) {
    for (const AdapterRows& r : ranges) {
        if (r.set == nullptr || layer >= static_cast<int64_t>(r.set->control.size())) continue;
        const std::vector<float>& v = r.set->control[static_cast<size_t>(layer)];
        if (v.empty()) continue;
        for (int64_t t = 0; t < r.n_rows; ++t) {
            float* row = x + (r.first_row + t) * n_embd;
            for (int64_t i = 0; i < n_embd; ++i) row[i] += v[static_cast<size_t>(i)];
        }
    }
}

}  // namespace kvstash
