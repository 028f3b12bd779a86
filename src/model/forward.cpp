#include "model/forward.h"

#include <cmath>
#include <cstring>

#include "format/quantize.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/block_ops.h"
#include "model/model_access.h"

namespace kvstash {
namespace {

// Rounds a freshly computed K or V row to the cache type by storing it; attention then reads it back
// from the cache exactly as it will read it on every later step.
void store_rows(const float* src, int64_t n_tokens, int64_t width, bool keys, KvCache& kv, int64_t layer,
                int64_t first_pos) {
    const TensorType type = kv.type();
    for (int64_t t = 0; t < n_tokens; ++t) {
        uint8_t* dst = keys ? kv.k_row(layer, first_pos + t) : kv.v_row(layer, first_pos + t);
        const float* s = src + t * width;
        if (type == TensorType::F32) {
            std::memcpy(dst, s, static_cast<size_t>(width) * sizeof(float));
        } else if (type == TensorType::Q8_0) {
            quantize_row_q8_0(s, dst, width);  // ggml's reference rounding, from this row alone
        } else {
            auto* h = reinterpret_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < width; ++i) h[i] = fp32_to_fp16(s[i]);
        }
    }
}

// The sliding-window layers rotate with the global angles when their rope is the same (no own base):
// then their angles are neither computed nor stored twice. Frequency factors are weights of the global
// table only (rope_swa never has them), so a table with them is never shared.
bool swa_rope_is_global(const ModelConfig& c) {
    const RopeParams& g = c.rope;
    const RopeParams& w = c.rope_swa;
    return !g.has_freq_factors && !w.has_freq_factors && g.n_rot == w.n_rot && g.freq_base == w.freq_base &&
           g.linear_factor == w.linear_factor && g.layout == w.layout;
}

bool needs_swa_angles(const ModelConfig& c) { return c.sliding_window > 0 && !swa_rope_is_global(c); }

}  // namespace

void ForwardScratch::reserve(const ModelConfig& c, int64_t n) {
    if (n <= max_tokens) return;
    max_tokens = n;
    // Widths of absent parts (no attention in Mamba models, no FFN) are 0.
    const auto sz = [n](int64_t width) { return static_cast<size_t>(n * width); };
    x.resize(sz(c.n_embd));
    xn.resize(sz(c.n_embd));
    q.resize(sz(c.n_embd_q()));
    k.resize(sz(c.n_embd_kv()));
    v.resize(sz(c.n_embd_kv()));
    attn.resize(sz(c.n_embd_q()));
    proj.resize(sz(c.n_embd));
    gate.resize(sz(c.n_ff));
    up.resize(sz(c.n_ff));
    rope_cos.resize(sz(c.rope.n_rot / 2));
    rope_sin.resize(sz(c.rope.n_rot / 2));
    const int64_t swa_half_rot = needs_swa_angles(c) ? c.rope_swa.n_rot / 2 : 0;
    rope_cos_swa.resize(sz(swa_half_rot));
    rope_sin_swa.resize(sz(swa_half_rot));
}

void model_forward(const ModelImpl& model, std::span<const ForwardSegment> segments, ForwardScratch& s,
                   ThreadPool& pool) {
    const ModelConfig& c = model.config;
    const ModelWeights& w = model.weights;
    const int64_t half_rot = c.rope.n_rot / 2;
    // Each angle buffer is (n, its own n_rot / 2): the two ropes may rotate different widths.
    const bool swa_angles = needs_swa_angles(c);
    const int64_t swa_half_rot = swa_angles ? c.rope_swa.n_rot / 2 : half_rot;
    int64_t n = 0;  // rows of the micro-batch, all segments
    for (const ForwardSegment& seg : segments) n += static_cast<int64_t>(seg.tokens.size());
    if (n == 0) return;
    // Learned positions end at their table: refuse before anything is written to a cache.
    for (const ForwardSegment& seg : segments) {
        check_positions(c, seg.first_pos, static_cast<int64_t>(seg.tokens.size()));
    }
    s.reserve(c, n);

    const bool rope = c.n_kv_layers > 0 && c.use_rope;
    std::vector<AttentionSegment>& attention_segments = s.attention_segments;
    attention_segments.clear();
    {
        int64_t row = 0;
        for (const ForwardSegment& seg : segments) {
            const auto count = static_cast<int64_t>(seg.tokens.size());
            for (int64_t t = 0; t < count; ++t, ++row) {
                float* x = s.x.data() + row * c.n_embd;
                dequantize_row(w.token_embd.type, w.token_embd.row(seg.tokens[static_cast<size_t>(t)]), x, c.n_embd);
                if (c.learned_positions) add_position_embedding(c, w, seg.first_pos + t, x, s.xn.data());
                if (c.embedding_scale != 1.0f) {
                    for (int64_t i = 0; i < c.n_embd; ++i) x[i] *= c.embedding_scale;
                }
                if (rope) {
                    model.rope.angles(seg.first_pos + t, s.rope_cos.data() + row * half_rot,
                                      s.rope_sin.data() + row * half_rot);
                    if (swa_angles) {
                        model.rope_swa.angles(seg.first_pos + t, s.rope_cos_swa.data() + row * swa_half_rot,
                                              s.rope_sin_swa.data() + row * swa_half_rot);
                    }
                }
            }
            attention_segments.push_back(AttentionSegment{seg.kv, seg.first_pos, count});
        }
    }
    // Adapters: each segment's rows under its own set (none at all: the ranges stay empty).
    s.adapter_rows.clear();
    s.adapter_output_rows.clear();
    {
        bool any = false;
        for (const ForwardSegment& seg : segments) any = any || seg.adapters != nullptr;
        int64_t row = 0;
        int64_t out_row = 0;
        for (const ForwardSegment& seg : segments) {
            if (!any) break;
            const auto count = static_cast<int64_t>(seg.tokens.size());
            s.adapter_rows.push_back(AdapterRows{row, count, seg.adapters});
            s.adapter_output_rows.push_back(AdapterRows{out_row, count - seg.logits_from, seg.adapters});
            row += count;
            out_row += count - seg.logits_from;
        }
    }
    const bool lora = any_lora(s.adapter_rows);
    const bool control = any_control(s.adapter_rows);
    const std::span<const AdapterRows> lora_rows =
        lora ? std::span<const AdapterRows>(s.adapter_rows) : std::span<const AdapterRows>();

    AttentionShape shape;
    shape.n_head = c.n_head;
    shape.n_head_kv = c.n_head_kv;
    shape.head_dim = c.head_dim;
    shape.scale = c.attention_scale != 0.0f
                      ? c.attention_scale
                      : (c.head_dim > 0 ? 1.0f / std::sqrt(static_cast<float>(c.head_dim)) : 0.0f);

    // x += proj (× residual_scale: Granite).
    const auto add_residual = [&] {
        float* x = s.x.data();
        const float* p = s.proj.data();
        if (c.residual_scale != 1.0f) {
            for (int64_t i = 0; i < n * c.n_embd; ++i) x[i] += p[i] * c.residual_scale;
        } else {
            for (int64_t i = 0; i < n * c.n_embd; ++i) x[i] += p[i];
        }
    };

    for (int64_t il = 0; il < c.n_layer; ++il) {
        const LayerWeights& l = w.layers[static_cast<size_t>(il)];
        norm_rows(c, s.x.data(), l.attn_norm, l.attn_norm_b, s.xn.data(), n);
        if (c.is_recurrent(il)) {
            // Mamba block: projections over all rows, convolution and scan per sequence.
            mamba_block(model, il, segments, s.xn.data(), s.proj.data(), s.mamba, pool);
        } else {
            // Attention block: projections over all rows at once, then each row over its own sequence.
            const int64_t kv_layer = c.slot[static_cast<size_t>(il)];
            project_qkv(l.wq, s.q.data(), l.wk, s.k.data(), l.wv, s.v.data(), s.xn.data(), n, pool);
            if (lora) {
                apply_lora(lora_rows, il, LoraTarget::q, s.xn.data(), s.q.data(), s.lora, pool);
                apply_lora(lora_rows, il, LoraTarget::k, s.xn.data(), s.k.data(), s.lora, pool);
                apply_lora(lora_rows, il, LoraTarget::v, s.xn.data(), s.v.data(), s.lora, pool);
            }
            add_bias_rows(s.q.data(), l.bq, n);
            add_bias_rows(s.k.data(), l.bk, n);
            add_bias_rows(s.v.data(), l.bv, n);
            head_norm_rows(c, l.attn_q_norm, s.q.data(), n * c.n_head);  // gemma3
            head_norm_rows(c, l.attn_k_norm, s.k.data(), n * c.n_head_kv);
            const bool swa = c.is_swa(il);
            if (rope) {
                const bool own_angles = swa && swa_angles;
                const RopeTable& table = swa ? model.rope_swa : model.rope;
                const float* cos_all = own_angles ? s.rope_cos_swa.data() : s.rope_cos.data();
                const float* sin_all = own_angles ? s.rope_sin_swa.data() : s.rope_sin.data();
                const int64_t width = own_angles ? swa_half_rot : half_rot;
                for (int64_t t = 0; t < n; ++t) {
                    const float* cs = cos_all + t * width;
                    const float* sn = sin_all + t * width;
                    table.apply(s.q.data() + t * c.n_embd_q(), c.n_head, cs, sn);
                    table.apply(s.k.data() + t * c.n_embd_kv(), c.n_head_kv, cs, sn);
                }
            }
            shape.window = swa ? c.sliding_window : 0;
            int64_t row = 0;
            for (const ForwardSegment& seg : segments) {
                const auto count = static_cast<int64_t>(seg.tokens.size());
                store_rows(s.k.data() + row * c.n_embd_kv(), count, c.n_embd_kv(), /*keys=*/true, *seg.kv, kv_layer,
                           seg.first_pos);
                store_rows(s.v.data() + row * c.n_embd_kv(), count, c.n_embd_kv(), /*keys=*/false, *seg.kv, kv_layer,
                           seg.first_pos);
                row += count;
            }
            segment_attention(shape, attention_segments, kv_layer, s.q.data(), s.attn.data(), s.attention, pool);
            project(l.wo, s.attn.data(), n, s.proj.data(), pool);
            if (lora) apply_lora(lora_rows, il, LoraTarget::o, s.attn.data(), s.proj.data(), s.lora, pool);
            add_bias_rows(s.proj.data(), l.bo, n);
            post_norm_rows(c, l.attn_post_norm, s.proj.data(), n);  // gemma3
        }
        add_residual();

        if (c.has_ffn()) {
            norm_rows(c, s.x.data(), l.ffn_norm, l.ffn_norm_b, s.xn.data(), n);
            feed_forward(c, l, s.xn.data(), n, FfnScratch{s.gate.data(), s.up.data()}, s.proj.data(), pool,
                         LoraHook{lora_rows, il, &s.lora});
            post_norm_rows(c, l.ffn_post_norm, s.proj.data(), n);  // gemma3
            add_residual();
        }
        if (control) apply_control(s.adapter_rows, il, s.x.data(), c.n_embd);
    }

    {
        int64_t row = 0;
        for (const ForwardSegment& seg : segments) {
            const auto count = static_cast<int64_t>(seg.tokens.size());
            for (int64_t t = 0; seg.hidden != nullptr && t < count; ++t) {
                norm_rows(c, s.x.data() + (row + t) * c.n_embd, w.output_norm, w.output_norm_b,
                          seg.hidden + t * c.n_embd, 1);
            }
            row += count;
        }
    }

    // Logits of the selected rows only: gather their normalised rows, then one output matmul for all
    // (the output matrix, often the largest, is read once per micro-batch).
    int64_t n_out = 0;
    int64_t destinations = 0;
    float* single_destination = nullptr;
    {
        int64_t row = 0;
        for (const ForwardSegment& seg : segments) {
            const auto count = static_cast<int64_t>(seg.tokens.size());
            for (int64_t t = seg.logits_from; t < count; ++t) {
                norm_rows(c, s.x.data() + (row + t) * c.n_embd, w.output_norm, w.output_norm_b,
                          s.xn.data() + n_out * c.n_embd, 1);
                ++n_out;
            }
            if (seg.logits_from < count) {
                ++destinations;
                single_destination = seg.logits;
            }
            row += count;
        }
    }
    if (n_out == 0) return;
    const auto n_vocab = static_cast<size_t>(c.n_vocab);
    // Granite divides the logits by logit_scale (as llama.cpp: × (1 / logit_scale)).
    const auto scale_logits = [&](float* logits, int64_t rows) {
        if (c.logit_scale == 1.0f) return;
        const float inverse = 1.0f / c.logit_scale;
        for (size_t i = 0; i < static_cast<size_t>(rows) * n_vocab; ++i) logits[i] *= inverse;
    };
    if (destinations == 1) {
        project(w.output, s.xn.data(), n_out, single_destination, pool);
        if (lora) {
            apply_lora(s.adapter_output_rows, c.n_layer, LoraTarget::output, s.xn.data(), single_destination, s.lora,
                       pool);
        }
        scale_logits(single_destination, n_out);
        return;
    }
    s.logits.resize(static_cast<size_t>(n_out) * n_vocab);
    project(w.output, s.xn.data(), n_out, s.logits.data(), pool);
    if (lora)
        apply_lora(s.adapter_output_rows, c.n_layer, LoraTarget::output, s.xn.data(), s.logits.data(), s.lora, pool);
    scale_logits(s.logits.data(), n_out);
    const float* src = s.logits.data();
    for (const ForwardSegment& seg : segments) {
        const auto rows = static_cast<int64_t>(seg.tokens.size()) - seg.logits_from;
        if (rows <= 0) continue;
        const size_t count = static_cast<size_t>(rows) * n_vocab;
        std::memcpy(seg.logits, src, count * sizeof(float));
        src += count;
    }
}

}  // namespace kvstash
