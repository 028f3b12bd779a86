#include "model/forward.h"

#include <cmath>
#include <cstring>

#include "model/config.h"

namespace kvstash {
namespace {

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

int64_t segment_rows(const ForwardSegment& seg) { return static_cast<int64_t>(seg.tokens.size()); }

// One micro-batch on its way through the layers: what every block function reads.
struct Pass {
    const ModelImpl& model;
    const ModelConfig& c;
    std::span<const ForwardSegment> segments;
    Backend& backend;
    ForwardBuffers b;
    int64_t n = 0;  // rows, all segments
    std::span<const AttentionSegment> attention_segments;
    AdapterBatch adapters;
    bool rope = false;         // the attention layers rotate q and k
    RopeAngles global_angles;  // of model.rope
    RopeAngles swa_angles;     // of model.rope_swa: its own angles, or the global ones when they are equal
    AttentionShape shape;      // window set per layer
};

AttentionShape attention_shape(const ModelConfig& c) {
    AttentionShape shape;
    shape.n_head = c.n_head;
    shape.n_head_kv = c.n_head_kv;
    shape.head_dim = c.head_dim;
    shape.scale = c.attention_scale != 0.0f
                      ? c.attention_scale
                      : (c.head_dim > 0 ? 1.0f / std::sqrt(static_cast<float>(c.head_dim)) : 0.0f);
    return shape;
}

// Which rows belong to which segment: for attention (each row over its own cache) and for adapters
// (each segment's rows under its own set; when no segment has one the ranges stay empty).
void plan_rows(std::span<const ForwardSegment> segments, ForwardBookkeeping& book) {
    book.attention_segments.clear();
    book.adapter_rows.clear();
    book.adapter_output_rows.clear();
    bool any_adapters = false;
    for (const ForwardSegment& seg : segments) any_adapters = any_adapters || seg.adapters != nullptr;
    int64_t row = 0;
    int64_t out_row = 0;
    for (const ForwardSegment& seg : segments) {
        const int64_t count = segment_rows(seg);
        book.attention_segments.push_back(AttentionSegment{seg.kv, seg.first_pos, count});
        if (any_adapters) {
            book.adapter_rows.push_back(AdapterRows{row, count, seg.adapters});
            book.adapter_output_rows.push_back(AdapterRows{out_row, count - seg.logits_from, seg.adapters});
        }
        row += count;
        out_row += count - seg.logits_from;
    }
}

// x = the rows' embeddings; the rotation angles of every row at its own position.
void embed_rows(const Pass& p) {
    p.backend.embed(p.model, p.segments, p.b.x);
    if (!p.rope) return;
    p.backend.rope_angles(p.model.rope, p.global_angles.width, p.segments, p.b.rope_cos, p.b.rope_sin);
    if (p.swa_angles.cos != p.global_angles.cos) {
        p.backend.rope_angles(p.model.rope_swa, p.swa_angles.width, p.segments, p.b.rope_cos_swa, p.b.rope_sin_swa);
    }
}

// LoRA terms of the micro-batch's adapters after a projection of layer `il` (before its bias).
void add_lora(const Pass& p, int64_t il, LoraTarget target, const float* x, float* y) {
    if (p.adapters.lora) p.backend.lora(p.adapters.rows, il, target, x, y);
}

// proj = the attention block of layer il over the normalised rows xn: projections over all rows at
// once, q/k norms and rotation per row, this micro-batch's K/V stored in each segment's cache, then
// each row's attention over its own sequence.
void attention_block(Pass& p, int64_t il) {
    const ModelConfig& c = p.c;
    const LayerWeights& l = p.model.weights.layers[static_cast<size_t>(il)];
    const ForwardBuffers& b = p.b;
    Backend& be = p.backend;
    const int64_t kv_layer = c.slot[static_cast<size_t>(il)];
    be.project_qkv(l.wq, b.q, l.wk, b.k, l.wv, b.v, b.xn, p.n);
    add_lora(p, il, LoraTarget::q, b.xn, b.q);
    add_lora(p, il, LoraTarget::k, b.xn, b.k);
    add_lora(p, il, LoraTarget::v, b.xn, b.v);
    be.add_bias(b.q, l.bq, p.n);
    be.add_bias(b.k, l.bk, p.n);
    be.add_bias(b.v, l.bv, p.n);
    be.head_norm(c, l.attn_q_norm, b.q, p.n * c.n_head);  // gemma3
    be.head_norm(c, l.attn_k_norm, b.k, p.n * c.n_head_kv);
    const bool swa = c.is_swa(il);
    if (p.rope) {
        const RopeAngles& angles = swa ? p.swa_angles : p.global_angles;
        be.rope(angles, b.q, p.n, c.n_head, c.head_dim);
        be.rope(angles, b.k, p.n, c.n_head_kv, c.head_dim);
    }
    int64_t row = 0;
    for (const ForwardSegment& seg : p.segments) {
        const int64_t count = segment_rows(seg);
        be.kv_store(KvHalf::keys, b.k + row * c.n_embd_kv(), count, *seg.kv, kv_layer, seg.first_pos);
        be.kv_store(KvHalf::values, b.v + row * c.n_embd_kv(), count, *seg.kv, kv_layer, seg.first_pos);
        row += count;
    }
    p.shape.window = swa ? c.sliding_window : 0;
    be.attention(p.shape, p.attention_segments, kv_layer, b.q, b.attn);
    be.project(l.wo, b.attn, p.n, b.proj);
    add_lora(p, il, LoraTarget::o, b.attn, b.proj);
    be.add_bias(b.proj, l.bo, p.n);
    be.norm_in_place(c, l.attn_post_norm, b.proj, p.n);  // gemma3
}

// One layer: its attention or Mamba block, then its FFN, each added to the residual stream x; then the
// control vectors of the rows' adapters.
void layer(Pass& p, int64_t il) {
    const ModelConfig& c = p.c;
    const LayerWeights& l = p.model.weights.layers[static_cast<size_t>(il)];
    const ForwardBuffers& b = p.b;
    Backend& be = p.backend;
    be.norm(c, b.x, l.attn_norm, l.attn_norm_b, b.xn, p.n);
    if (c.is_recurrent(il)) {
        be.ssm_block(p.model, il, p.segments, b.xn, b.proj);
    } else {
        attention_block(p, il);
    }
    be.add_residual(b.x, b.proj, p.n * c.n_embd, c.residual_scale);  // × residual_scale: Granite
    if (c.has_ffn()) {
        be.norm(c, b.x, l.ffn_norm, l.ffn_norm_b, b.xn, p.n);
        be.feed_forward(c, l, b.xn, p.n, b.proj, p.adapters, il);
        be.norm_in_place(c, l.ffn_post_norm, b.proj, p.n);  // gemma3
        be.add_residual(b.x, b.proj, p.n * c.n_embd, c.residual_scale);
    }
    if (p.adapters.control) be.control(p.adapters.rows, il, b.x, c.n_embd);
}

// Segments that asked for hidden states get every row's final-norm row (what the output matrix
// multiplies), through xn.
void write_hidden(const Pass& p) {
    const ModelConfig& c = p.c;
    const ModelWeights& w = p.model.weights;
    int64_t row = 0;
    for (const ForwardSegment& seg : p.segments) {
        const int64_t count = segment_rows(seg);
        if (seg.hidden != nullptr) {
            p.backend.norm(c, p.b.x + row * c.n_embd, w.output_norm, w.output_norm_b, p.b.xn, count);
            p.backend.read_rows(p.b.xn, count * c.n_embd, seg.hidden);
        }
        row += count;
    }
}

// Logits of the selected rows only: their normalised rows gathered into xn, then one output matmul for
// all (the output matrix, often the largest, is read once per micro-batch), written straight to the one
// destination or scattered to several.
void write_logits(const Pass& p, ForwardBookkeeping& book) {
    const ModelConfig& c = p.c;
    const ModelWeights& w = p.model.weights;
    int64_t n_out = 0;
    int64_t destinations = 0;
    float* single_destination = nullptr;
    int64_t row = 0;
    for (const ForwardSegment& seg : p.segments) {
        const int64_t count = segment_rows(seg);
        if (seg.logits_from < count) {
            const int64_t rows = count - seg.logits_from;
            p.backend.norm(c, p.b.x + (row + seg.logits_from) * c.n_embd, w.output_norm, w.output_norm_b,
                           p.b.xn + n_out * c.n_embd, rows);
            n_out += rows;
            ++destinations;
            single_destination = seg.logits;
        }
        row += count;
    }
    if (n_out == 0) return;
    // Granite divides the logits by logit_scale (as llama.cpp: × (1 / logit_scale)).
    const float inverse_scale = c.logit_scale == 1.0f ? 1.0f : 1.0f / c.logit_scale;
    if (destinations == 1) {
        p.backend.logits(w.output, p.b.xn, n_out, p.adapters, c.n_layer, inverse_scale, single_destination);
        return;
    }
    const auto n_vocab = static_cast<size_t>(c.n_vocab);
    book.logits.resize(static_cast<size_t>(n_out) * n_vocab);
    p.backend.logits(w.output, p.b.xn, n_out, p.adapters, c.n_layer, inverse_scale, book.logits.data());
    const float* src = book.logits.data();
    for (const ForwardSegment& seg : p.segments) {
        const int64_t rows = segment_rows(seg) - seg.logits_from;
        if (rows <= 0) continue;
        const size_t count = static_cast<size_t>(rows) * n_vocab;
        std::memcpy(seg.logits, src, count * sizeof(float));
        src += count;
    }
}

}  // namespace

ForwardWidths forward_widths(const ModelConfig& c) {
    ForwardWidths w;
    w.embd = c.n_embd;
    w.q = c.n_embd_q();
    w.kv = c.n_embd_kv();
    w.ff = c.n_ff;
    w.half_rot = c.rope.n_rot / 2;
    w.half_rot_swa = needs_swa_angles(c) ? c.rope_swa.n_rot / 2 : 0;
    return w;
}

void model_forward(const ModelImpl& model, std::span<const ForwardSegment> segments, Backend& backend,
                   ForwardBookkeeping& book) {
    const ModelConfig& c = model.config;
    int64_t n = 0;
    for (const ForwardSegment& seg : segments) n += segment_rows(seg);
    if (n == 0) return;
    // Learned positions end at their table: refuse before anything is written to a cache.
    for (const ForwardSegment& seg : segments) check_positions(c, seg.first_pos, segment_rows(seg));

    plan_rows(segments, book);
    const AdapterBatch adapters{book.adapter_rows, book.adapter_output_rows, any_lora(book.adapter_rows),
                                any_control(book.adapter_rows)};
    const ForwardBuffers b = backend.reserve(c, n);
    const ForwardWidths widths = forward_widths(c);
    const RopeAngles global_angles{&model.rope, b.rope_cos, b.rope_sin, widths.half_rot};
    const RopeAngles swa_angles = needs_swa_angles(c)
                                      ? RopeAngles{&model.rope_swa, b.rope_cos_swa, b.rope_sin_swa, widths.half_rot_swa}
                                      : RopeAngles{&model.rope_swa, b.rope_cos, b.rope_sin, widths.half_rot};
    const bool rope = c.n_kv_layers > 0 && c.use_rope;
    Pass p{model,         c,          segments,          backend, b, n, book.attention_segments, adapters, rope,
           global_angles, swa_angles, attention_shape(c)};

    embed_rows(p);
    for (int64_t il = 0; il < c.n_layer; ++il) layer(p, il);
    write_hidden(p);
    write_logits(p, book);
}

}  // namespace kvstash
