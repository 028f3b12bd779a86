#include "backends/cpu/cpu_backend.h"

#include <cstring>
#include <vector>

#include "backends/cpu/adapters/control_vector.h"
#include "backends/cpu/adapters/lora_apply.h"
#include "backends/cpu/attention/segment_attention.h"
#include "backends/cpu/embed/embed.h"
#include "backends/cpu/ffn/feed_forward.h"
#include "backends/cpu/matmul/project.h"
#include "backends/cpu/norm/norm_rows.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "backends/cpu/ssm/mamba_block.h"
#include "format/quantize.h"
#include "format/tensor_type.h"
#include "kv/kv_cache.h"

namespace kvstash {
namespace {

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(int n_threads) : pool_(n_threads) {}

    std::string_view name() const override { return "cpu"; }
    int n_threads() const override { return pool_.n_threads(); }
    void bind_model(const ModelImpl& /*model*/) override {}  // the weights are read where they are mapped
    ForwardBuffers reserve(const ModelConfig& c, int64_t n_rows) override;

    void embed(const ModelImpl& model, std::span<const ForwardSegment> segments, float* x) override {
        embed_rows(model, segments, x, xn_.data());  // xn_: one row of scratch, the position embedding decoded
    }
    void rope_angles(const RopeTable& table, int64_t half_rot, std::span<const ForwardSegment> segments, float* cos,
                     float* sin) override;

    void norm(const ModelConfig& c, const float* x, const std::vector<float>& weight, const std::vector<float>& bias,
              float* out, int64_t rows) override {
        norm_rows(c, x, weight, bias, out, rows);
    }
    void norm_in_place(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t rows) override {
        post_norm_rows(c, weight, x, rows);
    }
    void head_norm(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t n_vectors) override {
        head_norm_rows(c, weight, x, n_vectors);
    }
    void project(const MatrixRef& w, const float* x, int64_t rows, float* y) override {
        kvstash::project(w, x, rows, y, pool_);
    }
    void project_qkv(const MatrixRef& wq, float* q, const MatrixRef& wk, float* k, const MatrixRef& wv, float* v,
                     const float* x, int64_t rows) override {
        kvstash::project_qkv(wq, q, wk, k, wv, v, x, rows, pool_);
    }
    void add_bias(float* y, const std::vector<float>& bias, int64_t rows) override { add_bias_rows(y, bias, rows); }
    void rope(const RopeAngles& angles, float* x, int64_t rows, int64_t n_heads, int64_t head_dim) override;
    void add_residual(float* x, const float* y, int64_t n, float scale) override;

    void kv_store(KvHalf half, const float* rows, int64_t n_rows, KvCache& kv, int64_t layer,
                  int64_t first_pos) override;
    void attention(const AttentionShape& shape, std::span<const AttentionSegment> segments, int64_t layer,
                   const float* q, float* out) override {
        segment_attention(shape, segments, layer, q, out, attention_, pool_);
    }

    void feed_forward(const ModelConfig& c, const LayerWeights& l, const float* xn, int64_t rows, float* out,
                      const AdapterBatch& adapters, int64_t layer) override {
        const LoraHook hook{adapters.lora ? adapters.rows : std::span<const AdapterRows>(), layer, &lora_};
        kvstash::feed_forward(c, l, xn, rows, FfnScratch{gate_.data(), up_.data()}, out, pool_, hook);
    }
    void ssm_block(const ModelImpl& model, int64_t layer, std::span<const ForwardSegment> segments, const float* xn,
                   float* out) override {
        mamba_block(model, layer, segments, xn, out, mamba_, pool_);
    }

    void lora(std::span<const AdapterRows> ranges, int64_t layer, LoraTarget target, const float* x,
              float* y) override {
        apply_lora(ranges, layer, target, x, y, lora_, pool_);
    }
    void control(std::span<const AdapterRows> ranges, int64_t layer, float* x, int64_t n_embd) override {
        apply_control(ranges, layer, x, n_embd);
    }

    void logits(const MatrixRef& output, const float* xn, int64_t rows, const AdapterBatch& adapters, int64_t n_layer,
                float inverse_scale, float* host) override;
    void read_rows(const float* src, int64_t n, float* host) override {
        std::memcpy(host, src, static_cast<size_t>(n) * sizeof(float));
    }

private:
    ThreadPool pool_;
    int64_t max_rows_ = 0;
    int64_t n_embd_ = 0;  // of the model the buffers were sized for (position embedding's scratch row)
    std::vector<float> x_, xn_, q_, k_, v_, attn_, proj_;
    std::vector<float> gate_, up_;  // (rows, n_ff) the FFN's intermediates
    std::vector<float> rope_cos_, rope_sin_, rope_cos_swa_, rope_sin_swa_;
    SegmentAttentionScratch attention_;
    MambaScratch mamba_;
    LoraScratch lora_;
};

ForwardBuffers CpuBackend::reserve(const ModelConfig& c, int64_t n) {
    if (n > max_rows_) {
        max_rows_ = n;
        const ForwardWidths w = forward_widths(c);
        const auto sz = [n](int64_t width) { return static_cast<size_t>(n * width); };
        x_.resize(sz(w.embd));
        xn_.resize(sz(w.embd));
        q_.resize(sz(w.q));
        k_.resize(sz(w.kv));
        v_.resize(sz(w.kv));
        attn_.resize(sz(w.q));
        proj_.resize(sz(w.embd));
        gate_.resize(sz(w.ff));
        up_.resize(sz(w.ff));
        rope_cos_.resize(sz(w.half_rot));
        rope_sin_.resize(sz(w.half_rot));
        rope_cos_swa_.resize(sz(w.half_rot_swa));
        rope_sin_swa_.resize(sz(w.half_rot_swa));
    }
    n_embd_ = c.n_embd;
    return ForwardBuffers{x_.data(),        xn_.data(),           q_.data(),           k_.data(),
                          v_.data(),        attn_.data(),         proj_.data(),        rope_cos_.data(),
                          rope_sin_.data(), rope_cos_swa_.data(), rope_sin_swa_.data()};
}

void CpuBackend::rope_angles(const RopeTable& table, int64_t half_rot, std::span<const ForwardSegment> segments,
                             float* cos, float* sin) {
    int64_t row = 0;
    for (const ForwardSegment& seg : segments) {
        const auto count = static_cast<int64_t>(seg.tokens.size());
        for (int64_t t = 0; t < count; ++t, ++row) {
            table.angles(seg.first_pos + t, cos + row * half_rot, sin + row * half_rot);
        }
    }
}

void CpuBackend::rope(const RopeAngles& a, float* x, int64_t rows, int64_t n_heads, int64_t head_dim) {
    const int64_t stride = n_heads * head_dim;
    for (int64_t t = 0; t < rows; ++t)
        a.table->apply(x + t * stride, n_heads, a.cos + t * a.width, a.sin + t * a.width);
}

void CpuBackend::add_residual(float* x, const float* y, int64_t n, float scale) {
    if (scale != 1.0f) {
        for (int64_t i = 0; i < n; ++i) x[i] += y[i] * scale;
    } else {
        for (int64_t i = 0; i < n; ++i) x[i] += y[i];
    }
}

void CpuBackend::kv_store(KvHalf half, const float* rows, int64_t n_rows, KvCache& kv, int64_t layer,
                          int64_t first_pos) {
    const TensorType type = kv.type();
    const int64_t width = kv.n_embd_kv();
    for (int64_t t = 0; t < n_rows; ++t) {
        uint8_t* dst = half == KvHalf::keys ? kv.k_row(layer, first_pos + t) : kv.v_row(layer, first_pos + t);
        const float* s = rows + t * width;
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

void CpuBackend::logits(const MatrixRef& output, const float* xn, int64_t rows, const AdapterBatch& adapters,
                        int64_t n_layer, float inverse_scale, float* host) {
    kvstash::project(output, xn, rows, host, pool_);
    if (adapters.lora) apply_lora(adapters.output_rows, n_layer, LoraTarget::output, xn, host, lora_, pool_);
    if (inverse_scale == 1.0f) return;
    const int64_t n = rows * output.rows;
    for (int64_t i = 0; i < n; ++i) host[i] *= inverse_scale;
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return std::make_unique<CpuBackend>(n_threads); }

}  // namespace kvstash
