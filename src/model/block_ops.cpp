#include "model/block_ops.h"

#include <string>

#include "backends/cpu/activation/activation.h"
#include "backends/cpu/activation/gelu.h"
#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/norm/layer_norm.h"
#include "backends/cpu/norm/norm.h"
#include "kvstash/error.h"

namespace kvstash {

void project(const MatrixRef& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
    matmul(w.type, w.data, w.rows, w.cols, x, n_tokens, y, &pool);
}

void project_qkv(const MatrixRef& wq, float* q, const MatrixRef& wk, float* k, const MatrixRef& wv, float* v,
                 const float* x, int64_t n_tokens, ThreadPool& pool) {
    const MatmulOperand ops[] = {
        {wq.type, wq.data, wq.rows, q}, {wk.type, wk.data, wk.rows, k}, {wv.type, wv.data, wv.rows, v}};
    matmul_shared_input(ops, wq.cols, x, n_tokens, &pool);
}

void norm_rows(const ModelConfig& c, const float* x, const std::vector<float>& weight, const std::vector<float>& bias,
               float* out, int64_t n_rows) {
    const int64_t n = c.n_embd;
    if (c.norm == NormKind::layer) {
        const float* b = bias.empty() ? nullptr : bias.data();
        for (int64_t t = 0; t < n_rows; ++t) layer_norm_row(x + t * n, weight.data(), b, out + t * n, n, c.norm_eps);
    } else {
        for (int64_t t = 0; t < n_rows; ++t) rms_norm_row(x + t * n, weight.data(), out + t * n, n, c.norm_eps);
    }
}

void head_norm_rows(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t n_vectors) {
    const auto width = static_cast<int64_t>(weight.size());
    // rms_norm_row takes the scale from the whole row before writing: in place is fine.
    for (int64_t v = 0; v < n_vectors; ++v)
        rms_norm_row(x + v * width, weight.data(), x + v * width, width, c.norm_eps);
}

void post_norm_rows(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t n_rows) {
    if (weight.empty()) return;
    norm_rows(c, x, weight, {}, x, n_rows);
}

void add_bias_rows(float* y, const std::vector<float>& bias, int64_t n_rows) {
    const auto width = static_cast<int64_t>(bias.size());
    for (int64_t t = 0; t < n_rows; ++t) {
        float* row = y + t * width;
        for (int64_t i = 0; i < width; ++i) row[i] += bias[static_cast<size_t>(i)];
    }
}

void feed_forward(const ModelConfig& c, const LayerWeights& l, const float* xn, int64_t n_tokens, FfnScratch s,
                  float* out, ThreadPool& pool, const LoraHook& lora) {
    if (c.ffn == FfnKind::gelu) {
        project(l.w_up, xn, n_tokens, s.up, pool);
        lora(LoraTarget::up, xn, s.up, pool);
        add_bias_rows(s.up, l.b_up, n_tokens);
        gelu(s.up, s.up, n_tokens * c.n_ff);
        project(l.w_down, s.up, n_tokens, out, pool);
        lora(LoraTarget::down, s.up, out, pool);
    } else {
        const MatmulOperand ops[] = {{l.w_gate.type, l.w_gate.data, l.w_gate.rows, s.gate},
                                     {l.w_up.type, l.w_up.data, l.w_up.rows, s.up}};
        matmul_shared_input(ops, l.w_gate.cols, xn, n_tokens, &pool);
        lora(LoraTarget::gate, xn, s.gate, pool);
        lora(LoraTarget::up, xn, s.up, pool);
        add_bias_rows(s.up, l.b_up, n_tokens);
        if (c.ffn == FfnKind::geglu) {
            gelu(s.gate, s.gate, n_tokens * c.n_ff);
            for (int64_t i = 0; i < n_tokens * c.n_ff; ++i) s.gate[i] *= s.up[i];
        } else {
            swiglu(s.gate, s.up, s.gate, n_tokens * c.n_ff);
        }
        project(l.w_down, s.gate, n_tokens, out, pool);
        lora(LoraTarget::down, s.gate, out, pool);
    }
    add_bias_rows(out, l.b_down, n_tokens);
}

void check_positions(const ModelConfig& c, int64_t first, int64_t count) {
    if (!c.learned_positions || first + count <= c.n_ctx_train) return;
    throw Error(ErrorCode::out_of_range,
                "position " + std::to_string(first + count - 1) + " is beyond this model's learned position table (" +
                    std::to_string(c.n_ctx_train) + " positions, context_length); the context cannot grow past it");
}

void add_position_embedding(const ModelConfig& c, const ModelWeights& w, int64_t pos, float* x, float* tmp) {
    check_positions(c, pos, 1);
    const MatrixRef& p = w.position_embd;
    dequantize_row(p.type, p.row(pos), tmp, c.n_embd);
    for (int64_t i = 0; i < c.n_embd; ++i) x[i] += tmp[i];
}

}  // namespace kvstash
