// The model's tensors bound to the memory-mapped file, checked for presence, shape and type.
// Matrices stay in their file type (Q5_0 excepted where matmul does not read it: repacked to Q8_0 losslessly); only the
// small vectors (norm weights and biases, projection biases, rope factors) are decoded to f32 at load. Optional parts
// (biases, a norm's bias) are empty vectors when the file has none: the forward pass applies what is there.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/tensor_type.h"
#include "model/config.h"

namespace kvstash {

namespace gguf {
class File;
}

// A rows × cols matrix in its file type; row r starts at data + r * row_bytes.
struct MatrixRef {
    std::string name;
    TensorType type = TensorType::F32;
    const void* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    uint64_t row_bytes = 0;
    // The same matrix repacked at load for the CPU's prefill tiles (backends/cpu/matmul/repack_tiles.h), owned by
    // ModelWeights::tiles; null where no kernel of this process would read it.
    const void* tiles = nullptr;
    const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes; }
};

// One layer. A transformer layer has attention and FFN; a Mamba layer the ssm_* tensors only; a
// granitehybrid layer a Mamba block or attention, then the FFN. Absent parts are left empty.
struct LayerWeights {
    std::vector<float> attn_norm;    // (n_embd): the norm before the attention or Mamba block
    std::vector<float> attn_norm_b;  // (n_embd) LayerNorm bias, or empty
    // A fused attn_qkv (gpt2) is bound as three views of its row blocks Q | K | V, its bias split alike.
    MatrixRef wq;                   // (n_head * head_dim) × n_embd
    MatrixRef wk;                   // (n_head_kv * head_dim) × n_embd
    MatrixRef wv;                   // (n_head_kv * head_dim) × n_embd
    MatrixRef wo;                   // n_embd × (n_head * head_dim)
    std::vector<float> bq, bk, bv;  // (n_head * head_dim), (n_head_kv * head_dim) × 2, or empty
    std::vector<float> bo;          // (n_embd), or empty
    // gemma3 (empty elsewhere): RMSNorm of each Q and K head before RoPE, the same head_dim weights for
    // every head; RMSNorm of the attention output and of the FFN output before their residual adds.
    std::vector<float> attn_q_norm, attn_k_norm;  // (head_dim)
    std::vector<float> attn_post_norm;            // (n_embd)
    std::vector<float> ffn_post_norm;             // (n_embd)
    std::vector<float> ffn_norm;                  // (n_embd)
    std::vector<float> ffn_norm_b;                // (n_embd), or empty
    MatrixRef w_gate;                             // n_ff × n_embd (SwiGLU and GeGLU)
    MatrixRef w_up;                               // n_ff × n_embd
    MatrixRef w_down;                             // n_embd × n_ff
    std::vector<float> b_up;                      // (n_ff), or empty
    std::vector<float> b_down;                    // (n_embd), or empty

    // Mamba block (ModelConfig::ssm gives the sizes).
    MatrixRef ssm_in;                 // d_in_proj × n_embd
    std::vector<float> ssm_conv1d;    // (conv_channels × d_conv) taps, oldest input first
    std::vector<float> ssm_conv1d_b;  // (conv_channels), empty when the file has none
    MatrixRef ssm_x;                  // Mamba-1: (dt_rank + 2 d_state) × d_inner
    MatrixRef ssm_dt;                 // Mamba-1: d_inner × dt_rank
    std::vector<float> ssm_dt_b;      // (n_head)
    std::vector<float> ssm_a;         // Mamba-1: (d_inner × d_state); Mamba-2: (n_head). = -exp(A_log)
    std::vector<float> ssm_d;         // (n_head)
    std::vector<float> ssm_norm;      // Mamba-2: (d_inner), n_group groups of d_inner / n_group
    MatrixRef ssm_out;                // n_embd × d_inner
};

// A 64-byte-aligned buffer of repacked weights (the tiles' vector loads never split a cache line).
struct TileBuffer {
    struct Free {
        void operator()(uint8_t* p) const;
    };
    std::unique_ptr<uint8_t[], Free> data;
    uint64_t bytes = 0;
};

struct ModelWeights {
    MatrixRef token_embd;  // n_vocab × n_embd
    std::vector<LayerWeights> layers;
    MatrixRef position_embd;           // n_ctx_train × n_embd (learned positions), else empty
    std::vector<float> output_norm;    // (n_embd)
    std::vector<float> output_norm_b;  // (n_embd), or empty
    MatrixRef output;                  // n_vocab × n_embd (token_embd when tied)
    std::vector<float> rope_freqs;     // (n_rot / 2) frequency divisors, empty when absent
    uint64_t matrix_bytes = 0;         // bytes of all matrices read per token (for bandwidth figures)
    // Q5_0 matrices repacked to Q8_0 at load (same scale, q - 16 as int8: the same values; the layers' ones only
    // where matmul does not read q5_0 itself, weights.cpp q5_0_computed), which the
    // MatrixRefs above point into; empty when the file has none.
    std::vector<std::vector<uint8_t>> repacked;
    // The layers' matrices repacked for the CPU's prefill tiles (MatrixRef::tiles points into them;
    // model/prefill_tiles.h): memory beside the mapped file, which the other kernels (decode) still read. Empty where
    // none is made (another path than AVX-512, KVSTASH_REPACK=off, a device backend).
    std::vector<TileBuffer> tiles;
    uint64_t tile_bytes = 0;      // their total bytes
    double tile_seconds = 0.0;    // the time taken to make them at load
    uint64_t tiles_left_out = 0;  // bytes they would have taken where they did not fit (model/prefill_tiles.h)

    // Move-only: a copy's MatrixRefs would point into the original's repacked buffers.
    ModelWeights() = default;
    ModelWeights(const ModelWeights&) = delete;
    ModelWeights& operator=(const ModelWeights&) = delete;
    ModelWeights(ModelWeights&&) = default;
    ModelWeights& operator=(ModelWeights&&) = default;
};

// Binds every tensor the model's architecture needs. Throws Error(bad_format) naming a missing tensor or
// printing expected vs actual shape, Error(unsupported) for optional tensors kvstash does not apply
// (e.g. a gate bias, an output bias, MoE routers).
ModelWeights bind_weights(const gguf::File& file, const ModelConfig& config);

}  // namespace kvstash
