// The model's tensors bound to the memory-mapped file, checked for presence, shape and type.
// Matrices stay in their file type; only the small vectors (norm weights, rope factors) are decoded
// to f32 at load.
#pragma once

#include <cstdint>
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
    const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes; }
};

struct LayerWeights {
    std::vector<float> attn_norm;  // (n_embd)
    MatrixRef wq;                  // (n_head * head_dim) × n_embd
    MatrixRef wk;                  // (n_head_kv * head_dim) × n_embd
    MatrixRef wv;                  // (n_head_kv * head_dim) × n_embd
    MatrixRef wo;                  // n_embd × (n_head * head_dim)
    std::vector<float> ffn_norm;   // (n_embd)
    MatrixRef w_gate;              // n_ff × n_embd
    MatrixRef w_up;                // n_ff × n_embd
    MatrixRef w_down;              // n_embd × n_ff
};

struct ModelWeights {
    MatrixRef token_embd;  // n_vocab × n_embd
    std::vector<LayerWeights> layers;
    std::vector<float> output_norm;  // (n_embd)
    MatrixRef output;                // n_vocab × n_embd (token_embd when tied)
    std::vector<float> rope_freqs;   // (n_rot / 2) frequency divisors, empty when absent
    uint64_t matrix_bytes = 0;       // bytes of all matrices read per token (for bandwidth figures)
};

// Binds every tensor a Llama-family model needs. Throws Error(bad_format) naming a missing tensor or
// printing expected vs actual shape.
ModelWeights bind_llama_weights(const gguf::File& file, const ModelConfig& config);

}  // namespace kvstash
