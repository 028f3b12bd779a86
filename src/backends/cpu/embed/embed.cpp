#include "backends/cpu/embed/embed.h"

#include "format/tensor_type.h"

namespace kvstash {

void embed_rows(const ModelImpl& model, std::span<const ForwardSegment> segments, float* x, float* tmp) {
    const ModelConfig& c = model.config;
    const ModelWeights& w = model.weights;
    int64_t row = 0;
    for (const ForwardSegment& seg : segments) {
        const auto count = static_cast<int64_t>(seg.tokens.size());
        for (int64_t t = 0; t < count; ++t, ++row) {
            float* out = x + row * c.n_embd;
            dequantize_row(w.token_embd.type, w.token_embd.row(seg.tokens[static_cast<size_t>(t)]), out, c.n_embd);
            if (c.learned_positions) add_position_embedding(c, w, seg.first_pos + t, out, tmp);
            if (c.embedding_scale != 1.0f) {
                for (int64_t i = 0; i < c.n_embd; ++i) out[i] *= c.embedding_scale;
            }
        }
    }
}

void add_position_embedding(const ModelConfig& c, const ModelWeights& w, int64_t pos, float* x, float* tmp) {
    check_positions(c, pos, 1);
    const MatrixRef& p = w.position_embd;
    dequantize_row(p.type, p.row(pos), tmp, c.n_embd);
    for (int64_t i = 0; i < c.n_embd; ++i) x[i] += tmp[i];
}

}  // namespace kvstash
