#include "backends/cpu/adapters/lora_apply.h"

#include "backends/cpu/matmul/matmul.h"

namespace kvstash {

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

}  // namespace kvstash
