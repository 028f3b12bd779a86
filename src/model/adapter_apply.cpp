#include "model/adapter_apply.h"

#include "backends/cpu/matmul/matmul.h"

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

void apply_lora(std::span<const AdapterRows> ranges, int64_t layer, LoraTarget target, const float* x, float* y,
                LoraScratch& s, ThreadPool& pool) {
    for (const AdapterRows& r : ranges) {
        const std::vector<LoraPair>* pairs = lora_pairs(r.set, layer, target);
        if (pairs == nullptr || r.n_rows == 0) continue;
        for (const LoraPair& p : *pairs) {
            const int64_t n_in = p.a.cols;
            const int64_t rank = p.a.rows;
            const int64_t n_out = p.b.rows;
            s.ax.resize(static_cast<size_t>(r.n_rows * rank));
            s.bax.resize(static_cast<size_t>(r.n_rows * n_out));
            matmul(p.a.type, p.a.data, rank, n_in, x + r.first_row * n_in, r.n_rows, s.ax.data(), &pool);
            matmul(p.b.type, p.b.data, n_out, rank, s.ax.data(), r.n_rows, s.bax.data(), &pool);
            float* out = y + r.first_row * n_out;
            for (int64_t i = 0; i < r.n_rows * n_out; ++i) out[i] += p.scale * s.bax[static_cast<size_t>(i)];
        }
    }
}

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
