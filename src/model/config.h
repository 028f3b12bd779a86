// Hyper-parameters of a model, read from GGUF metadata (`<arch>.*` keys): Llama-family transformers (llama,
// qwen2), GPT-2, Mamba-1 / Mamba-2 recurrent models and Granite-4.0-H-style hybrids (Mamba-2 and attention
// layers). What differs between the transformer families is data (norm kind, FFN kind, position encoding,
// which biases the file has), read by one forward pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/rope/rope_params.h"
#include "kv/recurrent_state.h"

namespace kvstash {

namespace gguf {
class File;
}

// The architectures kvstash runs (general.architecture).
enum class ModelFamily {
    llama,           // "llama": attention + SwiGLU FFN in every layer
    qwen2,           // "qwen2": llama with q/k/v biases and NEOX RoPE
    gpt2,            // "gpt2": learned positions, LayerNorm with bias, fused QKV, GELU FFN, biases everywhere
    gemma3,          // "gemma3": q/k norms, post-attention/FFN norms, GeGLU, sliding-window layers (docs/gemma3.md)
    mamba,           // "mamba": Mamba-1 blocks only
    mamba2,          // "mamba2": Mamba-2 blocks only
    granite_hybrid,  // "granitehybrid": Mamba-2 or attention per layer, each followed by a SwiGLU FFN
};

// The selective state-space (Mamba) block's sizes (`<arch>.ssm.*`).
struct SsmConfig {
    bool mamba2 = false;   // Mamba-2 (scalar decay per head, grouped B/C, gated group norm) or Mamba-1
    int64_t d_conv = 0;    // ssm.conv_kernel: taps of the causal convolution
    int64_t d_inner = 0;   // ssm.inner_size
    int64_t d_state = 0;   // ssm.state_size
    int64_t dt_rank = 0;   // Mamba-1: ssm.time_step_rank (rank of the dt projection); Mamba-2: = n_head
    int64_t n_head = 0;    // Mamba-1: d_inner (one channel per head); Mamba-2: ssm.time_step_rank
    int64_t head_dim = 0;  // d_inner / n_head
    int64_t n_group = 1;   // Mamba-2: ssm.group_count (B and C shared by n_head / n_group heads)

    // Channels of the convolution: x (Mamba-1); x, B and C (Mamba-2).
    int64_t conv_channels() const { return mamba2 ? d_inner + 2 * n_group * d_state : d_inner; }
    // Rows of ssm_in: x and z (Mamba-1); z, x, B, C and dt (Mamba-2).
    int64_t d_in_proj() const { return mamba2 ? 2 * d_inner + 2 * n_group * d_state + n_head : 2 * d_inner; }
    int64_t conv_floats() const { return (d_conv - 1) * conv_channels(); }  // per layer and sequence
    int64_t scan_floats() const { return d_inner * d_state; }               // per layer and sequence
};

// The normalization before each block and before the output.
enum class NormKind {
    rms,    // RMSNorm with weight (llama, qwen2, Mamba)
    layer,  // LayerNorm with weight and bias (gpt2)
};

// The feed-forward block.
enum class FfnKind {
    swiglu,  // down(silu(gate(x)) * up(x))
    gelu,    // down(gelu(up(x) + b_up)) + b_down (gpt2; tanh approximation)
    geglu,   // down(gelu(gate(x)) * up(x)) (gemma3; tanh approximation)
};

struct ModelConfig {
    std::string architecture;  // general.architecture, e.g. "llama"
    ModelFamily family = ModelFamily::llama;
    std::string name;         // general.name (informational)
    int64_t n_layer = 0;      // <arch>.block_count
    int64_t n_embd = 0;       // <arch>.embedding_length
    int64_t n_ff = 0;         // <arch>.feed_forward_length (0: no FFN, Mamba)
    int64_t n_head = 0;       // <arch>.attention.head_count
    int64_t n_head_kv = 0;    // <arch>.attention.head_count_kv (GQA when < n_head); of the attention layers
    int64_t head_dim = 0;     // <arch>.attention.key_length, default n_embd / n_head
    int64_t n_vocab = 0;      // <arch>.vocab_size or the token_embd rows
    int64_t n_ctx_train = 0;  // <arch>.context_length
    NormKind norm = NormKind::rms;
    // <arch>.attention.layer_norm_rms_epsilon (RMSNorm) or <arch>.attention.layer_norm_epsilon (LayerNorm)
    float norm_eps = 1e-5f;
    FfnKind ffn = FfnKind::swiglu;
    // <arch>.rope.dimension_count (n_rot, default head_dim), .rope.freq_base, .rope.scaling.type / .factor
    // (linear_factor); has_freq_factors: a rope_freqs.weight tensor (Llama 3.1 "llama3" scaling).
    RopeParams rope;
    bool tied_output = false;  // no output.weight: the output projection reuses token_embd.weight
    bool use_rope = true;      // granitehybrid: rope.scaling.finetuned = false turns RoPE off (NoPE); gpt2: false
    // gpt2: a position_embd table of n_ctx_train rows added to the token embeddings; positions at or past
    // n_ctx_train have no embedding and are refused.
    bool learned_positions = false;

    // Sliding-window attention (gemma3): on a layer with swa[l] = 1, the query at position p attends to
    // keys p - sliding_window < p' <= p only, and rotates with rope_swa (its own base). 0 / empty: none.
    int64_t sliding_window = 0;  // <arch>.attention.sliding_window
    std::vector<uint8_t> swa;    // (n_layer) 1 = sliding-window layer
    RopeParams rope_swa;         // rope of the sliding-window layers (rope.freq_base_swa)
    bool is_swa(int64_t layer) const { return !swa.empty() && swa[static_cast<size_t>(layer)] != 0; }

    // Granite scales (1 or 0 when absent): embeddings × embedding_scale; each block's output ×
    // residual_scale before the residual add; attention scores × attention_scale (0: 1 / sqrt(head_dim));
    // logits × (1 / logit_scale).
    float embedding_scale = 1.0f;
    float residual_scale = 1.0f;
    float attention_scale = 0.0f;
    float logit_scale = 1.0f;

    SsmConfig ssm;
    // Per layer: recurrent (Mamba block) or attention. `slot` numbers each kind's layers from 0: the
    // layer's index in the KV cache or in the recurrent state.
    std::vector<uint8_t> recurrent;  // (n_layer) 1 = Mamba block
    std::vector<int64_t> slot;       // (n_layer)
    int64_t n_kv_layers = 0;         // attention layers
    int64_t n_recurrent_layers = 0;  // Mamba layers

    bool is_recurrent(int64_t layer) const { return recurrent[static_cast<size_t>(layer)] != 0; }
    RecurrentShape recurrent_shape() const { return {n_recurrent_layers, ssm.conv_floats(), ssm.scan_floats()}; }
    bool has_ffn() const { return n_ff > 0; }

    int64_t n_embd_kv() const { return n_head_kv * head_dim; }  // K or V width per token and layer
    int64_t n_embd_q() const { return n_head * head_dim; }
};

// Reads and validates the hyper-parameters; throws Error(unsupported) for an architecture kvstash
// cannot run and Error(bad_format) for missing or inconsistent values (naming the key).
ModelConfig read_model_config(const gguf::File& file);

// Throws Error(out_of_range) when a learned-position model is asked for positions [first, first + count)
// beyond its table (n_ctx_train rows); nothing for other models. The forward pass checks every segment
// before it writes anything to a cache.
void check_positions(const ModelConfig& c, int64_t first, int64_t count);

}  // namespace kvstash
