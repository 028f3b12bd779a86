// The CUDA backend (backends/cuda/cuda_backend.h): each Backend op enqueued on one stream as the kernels of
// cuda_ops.cuh, over device copies of the weights (made in bind_model, found by the host description's
// address) and device activations. Host data crosses explicitly: token ids, RoPE angles (the host table's
// exact bits, copied up), block pointer tables, positions; results come down in logits and read_rows.
//
// Batch invariance: every kernel computes each output element in one order of its own inputs (cuda_ops.cuh);
// this file only chooses which rows go to which kernel, never a reduction shape that depends on the batch.
// NOT YET RUN ON A GPU (docs/cuda.md): compiled and linked on a machine without one.
#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cuda/cuda_device_memory.h"
#include "backends/cuda/cuda_ops.cuh"
#include "kv/kv_cache.h"
#include "kvstash/error.h"
#include "model/model_access.h"

namespace kvstash {
namespace {

const char* family_name(ModelFamily f) {
    switch (f) {
        case ModelFamily::llama: return "llama";
        case ModelFamily::qwen2: return "qwen2";
        case ModelFamily::gpt2: return "gpt2";
        case ModelFamily::gemma3: return "gemma3";
        case ModelFamily::mamba: return "mamba";
        case ModelFamily::mamba2: return "mamba2";
        case ModelFamily::granite_hybrid: return "granitehybrid";
    }
    return "unknown";
}

// What the kernels cover: RMSNorm, SwiGLU, RoPE (normal or NEOX, one table), plain causal attention, no
// learned positions. Anything else is refused here, by name, before a single weight is copied.
void check_supported(const ModelConfig& c) {
    const std::string arch = c.architecture.empty() ? family_name(c.family) : c.architecture;
    const auto refuse = [&](const std::string& what) {
        throw Error(ErrorCode::unsupported, "--device cuda: " + arch + " models do not run on the CUDA backend yet (" +
                                                what + "); use --device cpu (the default)");
    };
    if (c.family != ModelFamily::llama && c.family != ModelFamily::qwen2) {
        refuse(std::string("the ") + family_name(c.family) + " family: only the Llama family and Qwen2 are wired");
    }
    if (c.n_recurrent_layers > 0) refuse("Mamba layers");
    if (c.norm != NormKind::rms) refuse("LayerNorm");
    if (c.ffn != FfnKind::swiglu) refuse("a feed-forward block other than SwiGLU");
    if (c.learned_positions) refuse("learned position embeddings");
    if (!c.swa.empty() || c.sliding_window > 0) refuse("sliding-window attention");
    if (c.n_kv_layers > 0 && !c.use_rope) refuse("attention without RoPE");
    if (c.head_dim > 256) refuse("head_dim " + std::to_string(c.head_dim) + " > 256");
}

class CudaBackend final : public Backend {
public:
    CudaBackend() {
        check(cudaSetDevice(0), "selecting device 0");
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
    }
    ~CudaBackend() override {
        if (stream_ != nullptr) cudaStreamDestroy(stream_);
    }
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    std::string_view name() const override { return "cuda"; }
    int n_threads() const override { return 1; }
    void bind_model(const ModelImpl& model) override;
    ForwardBuffers reserve(const ModelConfig& c, int64_t n_rows) override;

    void embed(const ModelImpl& model, std::span<const ForwardSegment> segments, float* x) override;
    void rope_angles(const RopeTable& table, int64_t half_rot, std::span<const ForwardSegment> segments, float* cos,
                     float* sin) override;

    void norm(const ModelConfig& c, const float* x, const std::vector<float>& weight, const std::vector<float>& bias,
              float* out, int64_t rows) override {
        if (c.norm != NormKind::rms || !bias.empty()) unsupported("LayerNorm");
        check(cuda::rms_norm(x, vec(weight), out, rows, c.n_embd, c.n_embd, c.norm_eps, stream_), "rms_norm");
    }
    void norm_in_place(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t rows) override {
        if (weight.empty()) return;
        norm(c, x, weight, {}, x, rows);
    }
    void head_norm(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t n_vectors) override {
        if (weight.empty()) return;
        const auto width = static_cast<int64_t>(weight.size());
        check(cuda::rms_norm(x, vec(weight), x, n_vectors, width, width, c.norm_eps, stream_), "head rms_norm");
    }
    void project(const MatrixRef& w, const float* x, int64_t rows, float* y) override;
    void project_qkv(const MatrixRef& wq, float* q, const MatrixRef& wk, float* k, const MatrixRef& wv, float* v,
                     const float* x, int64_t rows) override {
        project(wq, x, rows, q);
        project(wk, x, rows, k);
        project(wv, x, rows, v);
    }
    void add_bias(float* y, const std::vector<float>& bias, int64_t rows) override {
        if (bias.empty()) return;
        check(cuda::add_bias(y, vec(bias), rows, static_cast<int64_t>(bias.size()), stream_), "add_bias");
    }
    void rope(const RopeAngles& angles, float* x, int64_t rows, int64_t n_heads, int64_t head_dim) override {
        check(cuda::rope_rotate(rope_layout_, x, rows, n_heads * head_dim, n_heads, head_dim, angles.width, angles.cos,
                                angles.sin, stream_),
              "rope_rotate");
    }
    void add_residual(float* x, const float* y, int64_t n, float scale) override {
        check(cuda::add_residual(x, y, n, scale, stream_), "add_residual");
    }

    void kv_store(KvHalf half, const float* rows, int64_t n_rows, KvCache& kv, int64_t layer,
                  int64_t first_pos) override;
    void attention(const AttentionShape& shape, std::span<const AttentionSegment> segments, int64_t layer,
                   const float* q, float* out) override;

    void feed_forward(const ModelConfig& c, const LayerWeights& l, const float* xn, int64_t rows, float* out,
                      const AdapterBatch& adapters, int64_t layer) override;
    void ssm_block(const ModelImpl&, int64_t, std::span<const ForwardSegment>, const float*, float*) override {
        unsupported("Mamba blocks");
    }
    void lora(std::span<const AdapterRows>, int64_t, LoraTarget, const float*, float*) override {
        unsupported("LoRA adapters");
    }
    void control(std::span<const AdapterRows>, int64_t, float*, int64_t) override { unsupported("control vectors"); }

    void logits(const MatrixRef& output, const float* xn, int64_t rows, const AdapterBatch& adapters, int64_t n_layer,
                float inverse_scale, float* host) override;
    void read_rows(const float* src, int64_t n, float* host) override {
        check(cudaMemcpyAsync(host, src, bytes_of<float>(n), cudaMemcpyDeviceToHost, stream_), "copying rows down");
        check(cudaStreamSynchronize(stream_), "read_rows");
    }

private:
    [[noreturn]] static void unsupported(const std::string& what) {
        throw Error(ErrorCode::unsupported,
                    "--device cuda: " + what + " are not on the CUDA backend yet; use --device cpu (the default)");
    }
    static void check(cudaError_t e, const char* what) { check_cuda(e, what); }

    const void* matrix(const MatrixRef& w);
    const float* vec(const std::vector<float>& v);
    void upload_matrix(const MatrixRef& w);
    void upload_vector(const std::vector<float>& v);
    // Host bytes into device scratch `buf` (grown as needed), enqueued on the stream; the host copy must
    // stay alive until the stream passes it (the staging vectors are members, reused after a sync).
    template <class T>
    T* up(DeviceBuffer& buf, const std::vector<T>& host) {
        buf.reserve(host.size() * sizeof(T));
        if (!host.empty()) {
            check(cudaMemcpyAsync(buf.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream_),
                  "copying host data up");
        }
        return static_cast<T*>(buf.data());
    }
    void sync() { check(cudaStreamSynchronize(stream_), "synchronising the stream"); }
    const cuda::KvBlocks* block_tables(std::span<KvCache* const> caches, int64_t layer, bool keys_only, KvHalf half);

    cudaStream_t stream_ = nullptr;
    const ModelImpl* model_ = nullptr;
    RopeLayout rope_layout_ = RopeLayout::normal;
    std::unordered_map<const void*, DeviceBuffer> weights_;  // host data address -> device copy
    int64_t max_rows_ = 0;
    DeviceBuffer x_, xn_, q_, k_, v_, attn_, proj_, gate_, up_, cos_, sin_, logits_;
    // Host staging of the last op that copied host data up (synchronised before each reuse).
    std::vector<int32_t> h_ids_, h_row_view_;
    std::vector<int64_t> h_pos_;
    std::vector<float> h_cos_, h_sin_;
    std::vector<cuda::KvBlocks> h_views_;
    std::vector<const uint8_t*> h_tables_;
    DeviceBuffer d_ids_, d_row_view_, d_pos_, d_views_, d_tables_, workspace_;
};

void CudaBackend::upload_matrix(const MatrixRef& w) {
    if (w.data == nullptr || weights_.count(w.data) != 0) return;
    if (!cuda::supports_weight_type(w.type)) {
        throw Error(ErrorCode::unsupported, "--device cuda: tensor " + w.name + " is of type " +
                                                tensor_type_name(static_cast<uint32_t>(w.type)) +
                                                ", which the CUDA kernels do not read yet (they take BF16, F16, Q8_0, "
                                                "Q4_0, Q4_1, Q4_K, Q5_K, Q6_K); use --device cpu");
    }
    DeviceBuffer buf;
    const size_t n = static_cast<size_t>(w.rows) * w.row_bytes;
    buf.reserve(n);
    check(cudaMemcpy(buf.data(), w.data, n, cudaMemcpyHostToDevice), "copying weights to the device");
    weights_.emplace(w.data, std::move(buf));
}

void CudaBackend::upload_vector(const std::vector<float>& v) {
    if (v.empty() || weights_.count(v.data()) != 0) return;
    DeviceBuffer buf;
    buf.reserve(v.size() * sizeof(float));
    check(cudaMemcpy(buf.data(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice),
          "copying weights to the device");
    weights_.emplace(v.data(), std::move(buf));
}

const void* CudaBackend::matrix(const MatrixRef& w) {
    auto it = weights_.find(w.data);
    if (it == weights_.end()) {
        upload_matrix(w);  // a matrix bind_model did not list: copied on first use
        it = weights_.find(w.data);
    }
    return it->second.data();
}

const float* CudaBackend::vec(const std::vector<float>& v) {
    auto it = weights_.find(v.data());
    if (it == weights_.end()) {
        upload_vector(v);
        it = weights_.find(v.data());
    }
    return static_cast<const float*>(it->second.data());
}

void CudaBackend::bind_model(const ModelImpl& model) {
    if (model_ == &model) return;
    check_supported(model.config);
    sync();
    weights_.clear();
    model_ = &model;
    rope_layout_ = model.config.rope.layout;
    const ModelWeights& w = model.weights;
    upload_matrix(w.token_embd);
    upload_matrix(w.output);
    upload_vector(w.output_norm);
    for (const LayerWeights& l : w.layers) {
        for (const MatrixRef* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) upload_matrix(*m);
        for (const std::vector<float>* v : {&l.attn_norm, &l.ffn_norm, &l.bq, &l.bk, &l.bv, &l.bo, &l.b_up, &l.b_down,
                                            &l.attn_q_norm, &l.attn_k_norm}) {
            upload_vector(*v);
        }
    }
}

ForwardBuffers CudaBackend::reserve(const ModelConfig& c, int64_t n) {
    const ForwardWidths w = forward_widths(c);
    const auto sz = [n](int64_t width) { return static_cast<size_t>(n * width) * sizeof(float); };
    sync();  // buffers may move: nothing in flight may still use them
    x_.reserve(sz(w.embd));
    xn_.reserve(sz(w.embd));
    q_.reserve(sz(w.q));
    k_.reserve(sz(w.kv));
    v_.reserve(sz(w.kv));
    attn_.reserve(sz(w.q));
    proj_.reserve(sz(w.embd));
    gate_.reserve(sz(w.ff));
    up_.reserve(sz(w.ff));
    cos_.reserve(sz(w.half_rot));
    sin_.reserve(sz(w.half_rot));
    max_rows_ = std::max(max_rows_, n);
    const auto f = [](DeviceBuffer& b) { return static_cast<float*>(b.data()); };
    return ForwardBuffers{f(x_), f(xn_), f(q_), f(k_), f(v_), f(attn_), f(proj_), f(cos_), f(sin_), nullptr, nullptr};
}

void CudaBackend::embed(const ModelImpl& model, std::span<const ForwardSegment> segments, float* x) {
    const ModelConfig& c = model.config;
    sync();
    h_ids_.clear();
    for (const ForwardSegment& seg : segments) h_ids_.insert(h_ids_.end(), seg.tokens.begin(), seg.tokens.end());
    const int32_t* ids = up(d_ids_, h_ids_);
    check(cuda::dequantize_rows(model.weights.token_embd.type, matrix(model.weights.token_embd), c.n_embd, ids,
                                static_cast<int64_t>(h_ids_.size()), x, stream_, c.embedding_scale),
          "embedding lookup");
}

// The host's own table (RopeTable::angles: the CPU's exact bits), copied up.
void CudaBackend::rope_angles(const RopeTable& table, int64_t half_rot, std::span<const ForwardSegment> segments,
                              float* cos, float* sin) {
    int64_t rows = 0;
    for (const ForwardSegment& seg : segments) rows += static_cast<int64_t>(seg.tokens.size());
    sync();
    h_cos_.resize(static_cast<size_t>(rows * half_rot));
    h_sin_.resize(static_cast<size_t>(rows * half_rot));
    int64_t row = 0;
    for (const ForwardSegment& seg : segments) {
        const auto count = static_cast<int64_t>(seg.tokens.size());
        for (int64_t t = 0; t < count; ++t, ++row) {
            table.angles(seg.first_pos + t, h_cos_.data() + row * half_rot, h_sin_.data() + row * half_rot);
        }
    }
    const size_t n = h_cos_.size() * sizeof(float);
    if (n == 0) return;
    check(cudaMemcpyAsync(cos, h_cos_.data(), n, cudaMemcpyHostToDevice, stream_), "copying RoPE angles up");
    check(cudaMemcpyAsync(sin, h_sin_.data(), n, cudaMemcpyHostToDevice, stream_), "copying RoPE angles up");
}

void CudaBackend::project(const MatrixRef& w, const float* x, int64_t rows, float* y) {
    cuda::MatmulArgs a;
    a.type = w.type;
    a.W = matrix(w);
    a.rows = w.rows;
    a.cols = w.cols;
    a.X = x;
    a.x_stride = w.cols;
    a.n_tokens = rows;
    a.Y = y;
    a.y_stride = w.rows;
    check(cuda::matmul(a, stream_), ("matmul of " + w.name).c_str());
}

const cuda::KvBlocks* CudaBackend::block_tables(std::span<KvCache* const> caches, int64_t layer, bool keys_only,
                                                KvHalf half) {
    h_tables_.clear();
    std::vector<size_t> k_at, v_at;
    for (KvCache* kv : caches) {
        if (kv->allocator().space() != MemorySpace::device) {
            throw Error(ErrorCode::invalid_argument,
                        "--device cuda: a state whose KV blocks are in host memory reached the CUDA backend (states "
                        "are made for one device: load or create it after choosing --device cuda)");
        }
        const KvLayerView view = kv->layer_view(layer);
        const auto n = static_cast<size_t>(kv->n_blocks());
        k_at.push_back(h_tables_.size());
        h_tables_.insert(h_tables_.end(), view.k_blocks, view.k_blocks + n);
        v_at.push_back(h_tables_.size());
        h_tables_.insert(h_tables_.end(), view.v_blocks, view.v_blocks + n);
    }
    const uint8_t* const* d_tables = up(d_tables_, h_tables_);
    h_views_.clear();
    for (size_t i = 0; i < caches.size(); ++i) {
        cuda::KvBlocks b;
        // keys_only: one half, written through both of kv_store's pointers (the same bytes, same thread).
        const size_t k = keys_only ? (half == KvHalf::keys ? k_at[i] : v_at[i]) : k_at[i];
        const size_t v = keys_only ? k : v_at[i];
        b.k_blocks = const_cast<uint8_t* const*>(d_tables + k);
        b.v_blocks = const_cast<uint8_t* const*>(d_tables + v);
        b.block_tokens = kv_block_tokens;
        b.row_bytes = static_cast<int64_t>(caches[i]->row_bytes());
        b.type = caches[i]->type();
        h_views_.push_back(b);
    }
    return up(d_views_, h_views_);
}

void CudaBackend::kv_store(KvHalf half, const float* rows, int64_t n_rows, KvCache& kv, int64_t layer,
                           int64_t first_pos) {
    if (n_rows == 0) return;
    sync();
    KvCache* caches[] = {&kv};
    const cuda::KvBlocks* views = block_tables(caches, layer, true, half);
    h_row_view_.assign(static_cast<size_t>(n_rows), 0);
    h_pos_.resize(static_cast<size_t>(n_rows));
    for (int64_t t = 0; t < n_rows; ++t) h_pos_[static_cast<size_t>(t)] = first_pos + t;
    const int64_t width = kv.n_embd_kv();
    check(cuda::kv_store(views, up(d_row_view_, h_row_view_), up(d_pos_, h_pos_), rows, width, rows, width, n_rows,
                         width, stream_),
          "kv_store");
}

void CudaBackend::attention(const AttentionShape& shape, std::span<const AttentionSegment> segments, int64_t layer,
                            const float* q, float* out) {
    sync();
    std::vector<KvCache*> caches;
    h_row_view_.clear();
    h_pos_.clear();
    for (const AttentionSegment& s : segments) {
        for (int64_t t = 0; t < s.n_rows; ++t) {
            h_row_view_.push_back(static_cast<int32_t>(caches.size()));
            h_pos_.push_back(s.first_pos + t);
        }
        caches.push_back(s.kv);
    }
    if (h_pos_.empty()) return;
    const cuda::KvBlocks* views = block_tables(caches, layer, false, KvHalf::keys);
    cuda::AttentionShape s;
    s.n_head = shape.n_head;
    s.n_head_kv = shape.n_head_kv;
    s.head_dim = shape.head_dim;
    s.scale = shape.scale;
    s.window = shape.window;
    const auto n_rows = static_cast<int64_t>(h_pos_.size());
    const size_t ws = cuda::attention_workspace_bytes(s, h_pos_.data(), n_rows);
    workspace_.reserve(ws);
    check(cuda::attention(s, views, up(d_row_view_, h_row_view_), up(d_pos_, h_pos_), h_pos_.data(), n_rows, q, out,
                          workspace_.data(), ws, stream_),
          "attention");
}

void CudaBackend::feed_forward(const ModelConfig& c, const LayerWeights& l, const float* xn, int64_t rows, float* out,
                               const AdapterBatch& adapters, int64_t /*layer*/) {
    if (c.ffn != FfnKind::swiglu) unsupported("GELU / GeGLU feed-forward blocks");
    if (adapters.lora) unsupported("LoRA adapters");
    auto* gate = static_cast<float*>(gate_.data());
    auto* upv = static_cast<float*>(up_.data());
    project(l.w_gate, xn, rows, gate);
    project(l.w_up, xn, rows, upv);
    add_bias(upv, l.b_up, rows);
    check(cuda::swiglu(gate, c.n_ff, upv, c.n_ff, gate, c.n_ff, rows, c.n_ff, stream_), "swiglu");
    project(l.w_down, gate, rows, out);
    add_bias(out, l.b_down, rows);
}

void CudaBackend::logits(const MatrixRef& output, const float* xn, int64_t rows, const AdapterBatch& adapters,
                         int64_t /*n_layer*/, float inverse_scale, float* host) {
    if (adapters.lora) unsupported("LoRA adapters");
    const int64_t n = rows * output.rows;
    logits_.reserve(static_cast<size_t>(n) * sizeof(float));
    project(output, xn, rows, static_cast<float*>(logits_.data()));
    check(cudaMemcpyAsync(host, logits_.data(), bytes_of<float>(n), cudaMemcpyDeviceToHost, stream_),
          "copying logits down");
    sync();
    if (inverse_scale == 1.0f) return;
    for (int64_t i = 0; i < n; ++i) host[i] *= inverse_scale;  // on the host, as the CPU backend: the same bits
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() {
    if (cuda_device_count() == 0) {
        throw Error(ErrorCode::unsupported,
                    "--device cuda: no CUDA device is usable here (no NVIDIA driver, no GPU, or "
                    "CUDA_VISIBLE_DEVICES hides them); use --device cpu");
    }
    return std::make_unique<CudaBackend>();
}

}  // namespace kvstash
