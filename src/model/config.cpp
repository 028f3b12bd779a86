#include "model/config.h"

#include <cmath>
#include <optional>
#include <string>

#include "format/gguf.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

constexpr int64_t kMaxContextLength = int64_t{1} << 26;  // tokens (67M)

[[noreturn]] void inconsistent(const std::string& what) {
    throw Error(ErrorCode::bad_format, "inconsistent model hyper-parameters: " + what);
}

bool is_integer_type(gguf::ValueType t) {
    using gguf::ValueType;
    return t == ValueType::UINT8 || t == ValueType::INT8 || t == ValueType::UINT16 || t == ValueType::INT16 ||
           t == ValueType::UINT32 || t == ValueType::INT32 || t == ValueType::UINT64 || t == ValueType::INT64;
}

// A key that holds one integer for every layer or an array of n_layer integers (llama.cpp writes
// per-layer arrays for hybrids, e.g. granitehybrid.attention.head_count_kv with 0 for recurrent layers).
std::vector<int64_t> per_layer_ints(const gguf::File& file, const std::string& key, int64_t n_layer,
                                    std::optional<int64_t> fallback) {
    const gguf::Value* v = file.find(key);
    if (!v) {
        if (!fallback) throw Error(ErrorCode::bad_format, "model metadata has no key '" + key + "'");
        return std::vector<int64_t>(static_cast<size_t>(n_layer), *fallback);
    }
    if (v->type != gguf::ValueType::ARRAY) {
        return std::vector<int64_t>(static_cast<size_t>(n_layer), file.require_int(key));
    }
    if (!is_integer_type(v->array_type) || v->array.size() != static_cast<size_t>(n_layer)) {
        inconsistent("'" + key + "' must be an integer or an array of block_count (" + std::to_string(n_layer) +
                     ") integers");
    }
    std::vector<int64_t> out;
    for (const gguf::Value& e : v->array) out.push_back(e.integer);
    return out;
}

const char* supported_list() { return "llama, qwen2, gpt2, gemma3, mamba, mamba2, granitehybrid"; }

ModelFamily family_of(const std::string& architecture) {
    if (architecture == "llama") return ModelFamily::llama;
    if (architecture == "qwen2") return ModelFamily::qwen2;
    if (architecture == "gpt2") return ModelFamily::gpt2;
    if (architecture == "gemma3") return ModelFamily::gemma3;
    if (architecture == "mamba") return ModelFamily::mamba;
    if (architecture == "mamba2") return ModelFamily::mamba2;
    if (architecture == "granitehybrid") return ModelFamily::granite_hybrid;
    throw Error(ErrorCode::unsupported, "model architecture '" + architecture +
                                            "' is not supported by kvstash yet (supported: " + supported_list() + ")");
}

// Attention hyper-parameters (every layer for llama; the attention layers of a hybrid, whose head
// counts are read per layer by the caller).
void read_attention(const gguf::File& file, const std::string& a, ModelConfig& c) {
    if (c.n_head <= 0 || c.n_head_kv <= 0) inconsistent("attention head counts must be positive");
    if (c.n_head % c.n_head_kv != 0) {
        inconsistent("head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                     std::to_string(c.n_head_kv));
    }
    c.head_dim = file.get_int(a + "attention.key_length").value_or(c.n_embd / c.n_head);
    const int64_t value_length = file.get_int(a + "attention.value_length").value_or(c.head_dim);
    if (value_length != c.head_dim) inconsistent("attention.value_length differs from attention.key_length");
    if (c.head_dim <= 0 || c.head_dim % 2 != 0) inconsistent("head dimension must be positive and even");
    c.rope.freq_base = static_cast<float>(file.get_float(a + "rope.freq_base").value_or(10000.0));
    c.rope.n_rot = file.get_int(a + "rope.dimension_count").value_or(c.head_dim);
    if (c.rope.n_rot <= 0 || c.rope.n_rot > c.head_dim || c.rope.n_rot % 2 != 0) {
        inconsistent("rope.dimension_count must be even and at most the head dimension");
    }
    if (auto type = file.get_string(a + "rope.scaling.type"); type && *type != "none") {
        if (*type == "linear") {
            c.rope.linear_factor = static_cast<float>(file.require_float(a + "rope.scaling.factor"));
            if (!(c.rope.linear_factor > 0.0f)) inconsistent("rope.scaling.factor must be positive");
        } else if (*type != "llama3") {  // llama3 scaling is carried by the rope_freqs tensor
            throw Error(ErrorCode::unsupported,
                        "rope scaling type '" + *type + "' is not supported (supported: none, linear, llama3)");
        }
    }
    c.rope.has_freq_factors = file.find_tensor("rope_freqs.weight") != nullptr;
}

// Gemma 3 as llama.cpp reads it (src/models/gemma3.cpp, llama-hparams.cpp set_swa_pattern; docs/gemma3.md).
void read_gemma3(const gguf::File& file, const std::string& a, ModelConfig& c) {
    c.rope.layout = RopeLayout::neox;
    c.ffn = FfnKind::geglu;
    c.embedding_scale = std::sqrt(static_cast<float>(c.n_embd));  // sqrtf(n_embd), as llama.cpp
    // Q is scaled by 1/sqrt(head_dim) after RoPE (1/sqrt(n_embd / n_head) for the 62-layer 27B model).
    const int64_t scale_dim = c.n_layer == 62 ? c.n_embd / c.n_head : c.head_dim;
    c.attention_scale = 1.0f / std::sqrt(static_cast<float>(scale_dim));
    if (file.find(a + "final_logit_softcapping") || file.find(a + "attn_logit_softcapping")) {
        throw Error(ErrorCode::unsupported, "gemma3 models with logit softcapping are not supported yet");
    }
    c.sliding_window = file.get_int(a + "attention.sliding_window").value_or(0);
    if (c.sliding_window < 0) inconsistent("attention.sliding_window must not be negative");
    if (c.sliding_window == 0) return;
    // The pattern: an array of per-layer flags, or a period n (layer l slides iff l % n < n - 1; 0: every
    // layer); absent: 6.
    c.swa.assign(static_cast<size_t>(c.n_layer), 0);
    const gguf::Value* pattern = file.find(a + "attention.sliding_window_pattern");
    if (pattern && pattern->type == gguf::ValueType::ARRAY) {
        if (pattern->array.size() != static_cast<size_t>(c.n_layer)) {
            inconsistent("attention.sliding_window_pattern must have block_count entries");
        }
        for (size_t il = 0; il < c.swa.size(); ++il) c.swa[il] = pattern->array[il].integer != 0 ? 1 : 0;
    } else {
        const int64_t n = pattern ? file.require_int(a + "attention.sliding_window_pattern") : 6;
        if (n < 0) inconsistent("attention.sliding_window_pattern must not be negative");
        for (int64_t il = 0; il < c.n_layer; ++il) c.swa[static_cast<size_t>(il)] = n == 0 || il % n < n - 1;
    }
    c.rope_swa = c.rope;
    c.rope_swa.linear_factor = 1.0f;  // llama.cpp: rope_freq_scale_train_swa = 1
    c.rope_swa.has_freq_factors = false;
    c.rope_swa.freq_base = static_cast<float>(file.get_float(a + "rope.freq_base_swa").value_or(10000.0));
}

void read_ssm(const gguf::File& file, const std::string& a, bool mamba2, ModelConfig& c) {
    SsmConfig& s = c.ssm;
    s.mamba2 = mamba2;
    s.d_conv = file.require_int(a + "ssm.conv_kernel");
    s.d_inner = file.require_int(a + "ssm.inner_size");
    s.d_state = file.require_int(a + "ssm.state_size");
    const int64_t time_step_rank = file.require_int(a + "ssm.time_step_rank");
    if (file.get_bool(a + "ssm.dt_b_c_rms").value_or(false)) {
        throw Error(ErrorCode::unsupported, "Mamba models with RMS-normed dt, B and C (" + a +
                                                "ssm.dt_b_c_rms, e.g. FalconMamba) are not supported yet");
    }
    if (s.d_conv < 2 || s.d_inner <= 0 || s.d_state <= 0 || time_step_rank <= 0) {
        inconsistent("ssm.conv_kernel must be at least 2 and ssm.inner_size, state_size, time_step_rank positive");
    }
    if (mamba2) {
        s.n_head = time_step_rank;
        s.dt_rank = time_step_rank;
        s.n_group = file.get_int(a + "ssm.group_count").value_or(1);
        if (s.d_inner % s.n_head != 0) inconsistent("ssm.inner_size is not a multiple of ssm.time_step_rank (heads)");
        if (s.n_group <= 0 || s.n_head % s.n_group != 0) {
            inconsistent("ssm.group_count must divide the number of heads (ssm.time_step_rank)");
        }
        if (s.d_inner % s.n_group != 0) inconsistent("ssm.inner_size is not a multiple of ssm.group_count");
    } else {
        s.n_head = s.d_inner;
        s.dt_rank = time_step_rank;
        s.n_group = 1;
    }
    s.head_dim = s.d_inner / s.n_head;
}

}  // namespace

ModelConfig read_model_config(const gguf::File& file) {
    ModelConfig c;
    c.architecture = file.require_string("general.architecture");
    c.family = family_of(c.architecture);
    c.name = file.get_string("general.name").value_or("");
    const std::string a = c.architecture + ".";
    c.n_layer = file.require_int(a + "block_count");
    c.n_embd = file.require_int(a + "embedding_length");
    c.n_ctx_train = file.get_int(a + "context_length").value_or(0);
    // Absent is 0 ("unknown"; --ctx-size then decides). Present, it sizes every default context: 0 or
    // 2^32-1 is a broken file, not a model (the longest published contexts are ~10M tokens).
    if (file.get_int(a + "context_length") && (c.n_ctx_train <= 0 || c.n_ctx_train > kMaxContextLength)) {
        inconsistent("context_length " + std::to_string(c.n_ctx_train) + " is outside 1.." +
                     std::to_string(kMaxContextLength));
    }
    if (c.family == ModelFamily::gpt2) {
        c.norm = NormKind::layer;
        c.norm_eps = static_cast<float>(file.require_float(a + "attention.layer_norm_epsilon"));
    } else {
        c.norm_eps = static_cast<float>(file.require_float(a + "attention.layer_norm_rms_epsilon"));
    }
    if (c.n_layer <= 0 || c.n_layer > (1 << 16) || c.n_embd <= 0) {
        inconsistent("block_count and embedding_length must be positive");
    }
    const auto n_layer = static_cast<size_t>(c.n_layer);
    c.recurrent.assign(n_layer, 0);

    switch (c.family) {
        case ModelFamily::llama:
        case ModelFamily::qwen2:
        case ModelFamily::gpt2:
        case ModelFamily::gemma3:
            c.n_ff = file.require_int(a + "feed_forward_length");
            if (c.n_ff <= 0) inconsistent("feed_forward_length must be positive");
            c.n_head = file.require_int(a + "attention.head_count");
            c.n_head_kv = file.get_int(a + "attention.head_count_kv").value_or(c.n_head);
            read_attention(file, a, c);
            // llama.cpp's rope type per architecture (llama_model_rope_type): qwen2 rotates halves (its
            // converter does not permute Q/K rows as it does for llama); gpt2 has learned positions.
            if (c.family == ModelFamily::qwen2) c.rope.layout = RopeLayout::neox;
            if (c.family == ModelFamily::gpt2) {
                c.use_rope = false;
                c.learned_positions = true;
                c.ffn = FfnKind::gelu;
                if (c.n_ctx_train <= 0) inconsistent("gpt2 needs context_length (the rows of position_embd)");
            }
            if (c.family == ModelFamily::gemma3) read_gemma3(file, a, c);
            break;
        case ModelFamily::mamba:
        case ModelFamily::mamba2:
            read_ssm(file, a, c.family == ModelFamily::mamba2, c);
            c.recurrent.assign(n_layer, 1);
            c.n_ff = 0;  // Mamba blocks have no FFN (the file says feed_forward_length = 0 or nothing)
            break;
        case ModelFamily::granite_hybrid: {
            read_ssm(file, a, /*mamba2=*/true, c);
            if (2 * c.n_embd != c.ssm.d_inner)
                inconsistent("granitehybrid needs ssm.inner_size = 2 × embedding_length");
            const std::vector<int64_t> kv_heads = per_layer_ints(file, a + "attention.head_count_kv", c.n_layer, {});
            const std::vector<int64_t> heads = per_layer_ints(file, a + "attention.head_count", c.n_layer, {});
            const std::vector<int64_t> ffn = per_layer_ints(file, a + "feed_forward_length", c.n_layer, {});
            for (size_t il = 0; il < n_layer; ++il) {
                c.recurrent[il] = kv_heads[il] == 0 ? 1 : 0;  // as llama.cpp: no KV heads = recurrent layer
                if (ffn[il] != ffn[0]) inconsistent("feed_forward_length differs between layers");
                if (c.recurrent[il]) continue;
                if (c.n_head_kv == 0) c.n_head = heads[il], c.n_head_kv = kv_heads[il];
                if (heads[il] != c.n_head || kv_heads[il] != c.n_head_kv) {
                    inconsistent("attention layers with different head counts are not supported");
                }
            }
            c.n_ff = ffn[0];
            if (c.n_ff <= 0) inconsistent("feed_forward_length must be positive");
            if (c.n_head_kv > 0) read_attention(file, a, c);
            c.use_rope = file.get_bool(a + "rope.scaling.finetuned").value_or(true);
            c.embedding_scale = static_cast<float>(file.get_float(a + "embedding_scale").value_or(0.0));
            c.residual_scale = static_cast<float>(file.get_float(a + "residual_scale").value_or(0.0));
            c.attention_scale = static_cast<float>(file.get_float(a + "attention.scale").value_or(0.0));
            c.logit_scale = static_cast<float>(file.get_float(a + "logit_scale").value_or(0.0));
            // 0 = absent, as llama.cpp treats them
            if (c.embedding_scale == 0.0f) c.embedding_scale = 1.0f;
            if (c.residual_scale == 0.0f) c.residual_scale = 1.0f;
            if (c.logit_scale == 0.0f) c.logit_scale = 1.0f;
            break;
        }
    }
    c.slot.assign(n_layer, 0);
    for (size_t il = 0; il < n_layer; ++il) {
        c.slot[il] = c.recurrent[il] ? c.n_recurrent_layers++ : c.n_kv_layers++;
    }
    c.tied_output = file.find_tensor("output.weight") == nullptr;

    const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
    if (!embd) throw Error(ErrorCode::bad_format, "model has no tensor 'token_embd.weight'");
    if (embd->dims.size() != 2) inconsistent("token_embd.weight must be 2-D");
    c.n_vocab = file.get_int(a + "vocab_size").value_or(embd->dims[1]);
    if (embd->dims[0] != c.n_embd || embd->dims[1] != c.n_vocab) {
        inconsistent("token_embd.weight has shape {" + std::to_string(embd->dims[0]) + ", " +
                     std::to_string(embd->dims[1]) + "}, expected {embedding_length " + std::to_string(c.n_embd) +
                     ", vocab " + std::to_string(c.n_vocab) + "}");
    }
    return c;
}

void check_positions(const ModelConfig& c, int64_t first, int64_t count) {
    if (!c.learned_positions || first + count <= c.n_ctx_train) return;
    throw Error(ErrorCode::out_of_range,
                "position " + std::to_string(first + count - 1) + " is beyond this model's learned position table (" +
                    std::to_string(c.n_ctx_train) + " positions, context_length); the context cannot grow past it");
}

}  // namespace kvstash
