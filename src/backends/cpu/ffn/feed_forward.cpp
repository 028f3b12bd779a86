#include "backends/cpu/ffn/feed_forward.h"

#include "backends/cpu/activation/activation.h"
#include "backends/cpu/activation/gelu.h"
#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/project.h"

namespace kvstash {

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
        const MatmulOperand ops[] = {{l.w_gate.type, l.w_gate.data, l.w_gate.rows, s.gate, l.w_gate.tiles},
                                     {l.w_up.type, l.w_up.data, l.w_up.rows, s.up, l.w_up.tiles}};
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

}  // namespace kvstash
