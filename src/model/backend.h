// The device-neutral ops the forward pass is written in (model/forward.cpp), and the interface a backend
// implements them behind: the CPU backend (backends/cpu/) with the kernels and their ISA variants, a
// device backend (CUDA) beside it.
//
// The forward pass only moves pointers to activation rows between ops; it never reads or writes an
// activation itself. Activations live in the backend's memory (ForwardBuffers: host memory on the CPU,
// device memory on a GPU); what crosses to the host is explicit (read_rows, and the logits op, which
// writes host memory). Token ids, positions, shapes and weights descriptions are host data.
//
// Weights are passed as the model's host descriptions (MatrixRef, std::vector<float>); a device backend
// keeps its own copy of each, made by bind_model() and found by the description's address.
//
// Every op keeps the batch-invariance contract (docs/architecture/batch-invariance.md): each output element is a fixed
// function of its own row's inputs (and, for attention and SSM, of its own sequence's earlier K/V or
// state), reduced in one order whatever the number of rows, the segments or the threads.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "backends/cpu/attention/attention.h"  // AttentionShape: plain shape data, the attention kernel's own
#include "kv/kv_cache.h"                       // KvHalf
#include "model/adapter_rows.h"
#include "model/attention_segment.h"
#include "model/config.h"
#include "model/forward_segment.h"
#include "model/model_access.h"
#include "model/weights.h"

namespace kvstash {

// Activation rows of one micro-batch in the backend's memory, each (rows, width) row-major. Widths of
// parts the model lacks are 0 (no attention in Mamba models, no FFN).
struct ForwardBuffers {
    float* x = nullptr;             // (rows, n_embd)   residual stream
    float* xn = nullptr;            // (rows, n_embd)   normalised input of a sub-layer
    float* q = nullptr;             // (rows, n_head * head_dim)
    float* k = nullptr;             // (rows, n_head_kv * head_dim)
    float* v = nullptr;             // (rows, n_head_kv * head_dim)
    float* attn = nullptr;          // (rows, n_head * head_dim)
    float* proj = nullptr;          // (rows, n_embd)   output of attn_output / ffn_down / the SSM block
    float* rope_cos = nullptr;      // (rows, rope.n_rot / 2)
    float* rope_sin = nullptr;      // (rows, rope.n_rot / 2)
    float* rope_cos_swa = nullptr;  // (rows, rope_swa.n_rot / 2) sliding layers' own angles, if any
    float* rope_sin_swa = nullptr;  // (rows, rope_swa.n_rot / 2)
};

// Floats per row of each activation (ForwardBuffers) and of the FFN's intermediates, for a backend's
// reserve(); 0 for parts the model lacks.
struct ForwardWidths {
    int64_t embd = 0;          // n_embd: x, xn, proj
    int64_t q = 0;             // n_head * head_dim: q, attn
    int64_t kv = 0;            // n_head_kv * head_dim: k, v
    int64_t ff = 0;            // n_ff: the FFN's gate and up
    int64_t half_rot = 0;      // rope.n_rot / 2: rope_cos, rope_sin
    int64_t half_rot_swa = 0;  // rope_swa.n_rot / 2 when the sliding layers have their own angles, else 0
};
ForwardWidths forward_widths(const ModelConfig& c);  // model/forward.cpp

// The rotation a rope op applies: the table and the angles of each row (rows × width cos and sin).
struct RopeAngles {
    const RopeTable* table = nullptr;
    const float* cos = nullptr;
    const float* sin = nullptr;
    int64_t width = 0;  // floats per row of cos / sin: the table's n_rot / 2
};

// Each sequence's rows under its adapters (model/adapter_rows.h); empty spans when no row has any.
struct AdapterBatch {
    std::span<const AdapterRows> rows;         // (segments) every row of each segment
    std::span<const AdapterRows> output_rows;  // (segments) the rows that get logits, packed
    bool lora = false;                         // some set has LoRA pairs
    bool control = false;                      // some set has control vectors
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual std::string_view name() const = 0;  // "cpu"
    virtual int n_threads() const = 0;

    // Called before the first forward pass with `model` (and again when another model comes); a device
    // backend uploads the weights here.
    virtual void bind_model(const ModelImpl& model) = 0;
    // Activation buffers for micro-batches of up to n_rows rows of this model; valid until the next call.
    virtual ForwardBuffers reserve(const ModelConfig& c, int64_t n_rows) = 0;

    // --- embedding and positions ---------------------------------------------------------------------
    // x (rows × n_embd) = each segment token's embedding row (+ its learned position embedding) ×
    // embedding_scale; rows concatenated in segment order.
    virtual void embed(const ModelImpl& model, std::span<const ForwardSegment> segments, float* x) = 0;
    // cos / sin (rows × table.n_rot / 2) = the table's angles at each row's absolute position.
    virtual void rope_angles(const RopeTable& table, int64_t half_rot, std::span<const ForwardSegment> segments,
                             float* cos, float* sin) = 0;

    // --- per-row ops ---------------------------------------------------------------------------------
    // out (rows × n_embd) = the config's norm (RMSNorm, or LayerNorm with `bias`) of each row of x.
    virtual void norm(const ModelConfig& c, const float* x, const std::vector<float>& weight,
                      const std::vector<float>& bias, float* out, int64_t rows) = 0;
    // The config's norm of each row of x (rows × n_embd) in place, without bias (gemma3's post-attention
    // and post-FFN norms); nothing when weight is empty.
    virtual void norm_in_place(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t rows) = 0;
    // RMSNorm in place of n_vectors consecutive vectors of weight.size() floats (per-head q/k norms);
    // nothing when weight is empty.
    virtual void head_norm(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t n_vectors) = 0;
    // y (rows × w.rows) = x (rows × w.cols) · wᵀ, with the weight's own element type.
    virtual void project(const MatrixRef& w, const float* x, int64_t rows, float* y) = 0;
    // q, k, v = the three projections of the same input rows (x read, and quantized, once).
    virtual void project_qkv(const MatrixRef& wq, float* q, const MatrixRef& wk, float* k, const MatrixRef& wv,
                             float* v, const float* x, int64_t rows) = 0;
    // y[r][i] += bias[i]; nothing when bias is empty.
    virtual void add_bias(float* y, const std::vector<float>& bias, int64_t rows) = 0;
    // Rotates the first n_rot dims of each of n_heads head vectors of each row of x (rows × n_heads ×
    // head_dim) in place, row t with angles row t.
    virtual void rope(const RopeAngles& angles, float* x, int64_t rows, int64_t n_heads, int64_t head_dim) = 0;
    // x[i] += y[i] × scale for i < n (scale 1: a plain add).
    virtual void add_residual(float* x, const float* y, int64_t n, float scale) = 0;

    // --- KV cache and attention ----------------------------------------------------------------------
    // Stores rows (rows × kv.n_embd_kv() f32) as positions first_pos.. of `layer` in the cache's own
    // element type (f32, f16, q8_0: each row rounded from itself alone); attention then reads them back
    // as it will on every later step.
    virtual void kv_store(KvHalf half, const float* rows, int64_t n_rows, KvCache& kv, int64_t layer,
                          int64_t first_pos) = 0;
    // Causal attention of each row of q over its own segment's cache blocks of `layer` (their K/V for
    // every position up to the row's own already stored).
    virtual void attention(const AttentionShape& shape, std::span<const AttentionSegment> segments, int64_t layer,
                           const float* q, float* out) = 0;

    // --- blocks --------------------------------------------------------------------------------------
    // out (rows × n_embd) = the layer's feed-forward block of xn (SwiGLU, GeGLU or GELU, biases, LoRA).
    virtual void feed_forward(const ModelConfig& c, const LayerWeights& l, const float* xn, int64_t rows, float* out,
                              const AdapterBatch& adapters, int64_t layer) = 0;
    // out (rows × n_embd) = the Mamba mixer of layer `layer` over xn: projections, then each segment's
    // causal convolution and selective scan over its own recurrent state (advanced, snapshots filled).
    virtual void ssm_block(const ModelImpl& model, int64_t layer, std::span<const ForwardSegment> segments,
                           const float* xn, float* out) = 0;

    // --- adapters ------------------------------------------------------------------------------------
    // y += each range's LoRA pairs for (layer, target) applied to x; layer = n_layer: the output matrix.
    virtual void lora(std::span<const AdapterRows> ranges, int64_t layer, LoraTarget target, const float* x,
                      float* y) = 0;
    // x (rows × n_embd) += each range's control vector for `layer`.
    virtual void control(std::span<const AdapterRows> ranges, int64_t layer, float* x, int64_t n_embd) = 0;

    // --- results, into host memory -------------------------------------------------------------------
    // host (rows × n_vocab) = xn (rows × n_embd) · outputᵀ (+ the output LoRA of adapters.output_rows),
    // × inverse_scale when it is not 1.
    virtual void logits(const MatrixRef& output, const float* xn, int64_t rows, const AdapterBatch& adapters,
                        int64_t n_layer, float inverse_scale, float* host) = 0;
    // host (n floats) = src (n floats of the backend's memory).
    virtual void read_rows(const float* src, int64_t n, float* host) = 0;
};

}  // namespace kvstash
