// Hyper-parameters of a Llama-family model, read from GGUF metadata (`<arch>.*` keys).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/rope_params.h"

namespace kvstash {

namespace gguf {
class File;
}

struct ModelConfig {
    std::string architecture;  // general.architecture, e.g. "llama"
    std::string name;          // general.name (informational)
    int64_t n_layer = 0;       // <arch>.block_count
    int64_t n_embd = 0;        // <arch>.embedding_length
    int64_t n_ff = 0;          // <arch>.feed_forward_length
    int64_t n_head = 0;        // <arch>.attention.head_count
    int64_t n_head_kv = 0;     // <arch>.attention.head_count_kv (GQA when < n_head)
    int64_t head_dim = 0;      // <arch>.attention.key_length, default n_embd / n_head
    int64_t n_vocab = 0;       // <arch>.vocab_size or the token_embd rows
    int64_t n_ctx_train = 0;   // <arch>.context_length
    float rms_eps = 1e-5f;     // <arch>.attention.layer_norm_rms_epsilon
    // <arch>.rope.dimension_count (n_rot, default head_dim), .rope.freq_base, .rope.scaling.type / .factor
    // (linear_factor); has_freq_factors: a rope_freqs.weight tensor (Llama 3.1 "llama3" scaling).
    RopeParams rope;
    bool tied_output = false;  // no output.weight: the output projection reuses token_embd.weight

    int64_t n_embd_kv() const { return n_head_kv * head_dim; }  // K or V width per token and layer
    int64_t n_embd_q() const { return n_head * head_dim; }
};

// Reads and validates the hyper-parameters; throws Error(unsupported) for an architecture kvstash
// cannot run and Error(bad_format) for missing or inconsistent values (naming the key).
ModelConfig read_model_config(const gguf::File& file);

}  // namespace kvstash
