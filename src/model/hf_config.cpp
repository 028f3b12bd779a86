#include "model/hf_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "kvstash/error.h"
#include "model/hf_rope_scaling.h"

namespace kvstash {
namespace {

using nlohmann::json;

struct Reader {
    const json& config;
    const std::string& path;

    [[noreturn]] void fail(const std::string& what) const { throw Error(ErrorCode::bad_format, path + ": " + what); }
    // The first of `keys` present and not null (the converter's find_hparam).
    const json* find(std::initializer_list<const char*> keys) const {
        for (const char* k : keys) {
            auto it = config.find(k);
            if (it != config.end() && !it->is_null()) return &*it;
        }
        return nullptr;
    }
    std::optional<int64_t> get_int(std::initializer_list<const char*> keys) const {
        const json* v = find(keys);
        if (!v) return std::nullopt;
        // Every count and size the loader reads is at least 1 (a 0 divides, or sizes nothing), and below
        // 2^31: each becomes a GGUF u32 and then an int32 in places.
        if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > INT32_MAX) {
            fail(std::string("'") + *keys.begin() + "' must be an integer from 1 to 2^31-1");
        }
        return v->get<int64_t>();
    }
    // A count that may be 0 (e.g. num_local_experts: 0 means a dense model), below 2^31.
    std::optional<int64_t> get_count(std::initializer_list<const char*> keys) const {
        const json* v = find(keys);
        if (!v) return std::nullopt;
        if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > INT32_MAX) {
            fail(std::string("'") + *keys.begin() + "' must be an integer from 0 to 2^31-1");
        }
        return v->get<int64_t>();
    }
    int64_t require_int(std::initializer_list<const char*> keys) const {
        if (auto v = get_int(keys)) return *v;
        fail(std::string("config.json has no '") + *keys.begin() + "'");
    }
    std::optional<double> get_float(std::initializer_list<const char*> keys) const {
        const json* v = find(keys);
        if (!v) return std::nullopt;
        if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0)
            fail(std::string("'") + *keys.begin() + "' must be a finite non-negative number");
        return v->get<double>();
    }
};

// The rope parameters as the converter sees them: `rope_parameters` (transformers 5; for Gemma 3 one entry per
// attention kind), else the older top-level rope_theta / rope_scaling.
json rope_parameters(const json& config) {
    if (auto it = config.find("rope_parameters"); it != config.end() && it->is_object()) return *it;
    json p = json::object();
    if (auto it = config.find("rope_scaling"); it != config.end() && it->is_object()) p = *it;
    if (auto it = config.find("rope_theta"); it != config.end()) p["rope_theta"] = *it;
    if (p.contains("type") && !p.contains("rope_type")) p["rope_type"] = p["type"];
    return p;
}

// GraniteHybridModel.set_gguf_parameters (Mamba 2 layers, attention layers where layer_types says so, a dense
// shared SwiGLU MLP in every layer, Granite's four multipliers). Mixture-of-experts checkpoints are refused.
template <typename PutU32, typename PutF32>
void read_granite_hybrid(const Reader& r, const json& config, const PutU32& put_u32, const PutF32& put_f32,
                         HfModelSpec& s) {
    if (r.get_count({"num_local_experts"}).value_or(0) > 0) {
        throw Error(ErrorCode::unsupported,
                    r.path +
                        ": GraniteMoeHybrid with experts (num_local_experts > 0) is not supported in a model "
                        "directory; convert it to GGUF with llama.cpp");
    }
    const int64_t n_embd = r.require_int({"hidden_size"});
    s.n_head = r.require_int({"num_attention_heads"});
    s.n_head_kv = r.get_int({"num_key_value_heads"}).value_or(s.n_head);
    const int64_t n_ff = r.require_int({"shared_intermediate_size", "intermediate_size"});
    const int64_t n_ssm_head = r.require_int({"mamba_n_heads"});
    s.ssm_group_count = r.get_int({"mamba_n_groups"}).value_or(1);
    const int64_t d_inner = r.get_int({"mamba_expand"}).value_or(2) * n_embd;
    std::vector<gguf::Value> kv_heads;
    const auto types = config.find("layer_types");
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const bool attention = types != config.end() && types->is_array() && static_cast<size_t>(il) < types->size() &&
                               (*types)[static_cast<size_t>(il)] == "attention";
        kv_heads.push_back(gguf::u32_value(static_cast<uint32_t>(attention ? s.n_head_kv : 0)));
    }
    const std::string a = s.architecture + ".";
    put_u32("context_length", int64_t{1} << 20);
    put_u32("embedding_length", n_embd);
    put_u32("feed_forward_length", n_ff);
    put_u32("attention.head_count", s.n_head);
    s.metadata.emplace_back(a + "attention.head_count_kv",
                            gguf::array_value(gguf::ValueType::UINT32, std::move(kv_heads)));
    put_f32("rope.freq_base", r.get_float({"rope_theta"}).value_or(10000.0));
    put_f32("attention.layer_norm_rms_epsilon", r.get_float({"rms_norm_eps"}).value_or(1e-6));
    put_u32("expert_count", 0);
    put_u32("expert_used_count", 0);
    put_u32("vocab_size", r.require_int({"vocab_size"}));
    put_u32("rope.dimension_count", r.get_int({"head_dim"}).value_or(n_embd / std::max<int64_t>(1, s.n_head)));
    put_f32("attention.scale", r.get_float({"attention_multiplier"}).value_or(0.0));
    put_f32("embedding_scale", r.get_float({"embedding_multiplier"}).value_or(0.0));
    put_f32("residual_scale", r.get_float({"residual_multiplier"}).value_or(0.0));
    put_f32("logit_scale", r.get_float({"logits_scaling"}).value_or(0.0));
    put_u32("expert_shared_feed_forward_length", n_ff);
    put_u32("ssm.conv_kernel", r.get_int({"mamba_d_conv"}).value_or(4));
    put_u32("ssm.state_size", r.get_int({"mamba_d_state"}).value_or(128));
    put_u32("ssm.group_count", s.ssm_group_count);
    put_u32("ssm.inner_size", d_inner);
    put_u32("ssm.time_step_rank", n_ssm_head);
    if (config.value("position_embedding_type", std::string("rope")) == "nope") {
        s.metadata.emplace_back(a + "rope.scaling.finetuned", gguf::bool_value(false));  // llama.cpp's "no RoPE"
    }
}

HfModelSpec read_hf_config_fields(const json& root, const std::string& path);

}  // namespace

// Fields of the wrong JSON type that the reader does not check one by one (a rope_scaling "factor" that
// is a string) throw nlohmann's type_error: reported as the malformed file it is.
HfModelSpec read_hf_config(const json& root, const std::string& path) {
    try {
        return read_hf_config_fields(root, path);
    } catch (const json::exception& e) {
        throw Error(ErrorCode::bad_format, path + ": a field has a value of the wrong type (" + e.what() + ")");
    }
}

namespace {

HfModelSpec read_hf_config_fields(const json& root, const std::string& path) {
    if (!root.is_object()) throw Error(ErrorCode::bad_format, path + ": config.json is not a JSON object");
    // Multimodal wrappers keep the language model's hyper-parameters in text_config.
    json config = root;
    if (auto it = root.find("text_config"); it != root.end() && it->is_object()) {
        for (const auto& [k, v] : it->items()) config[k] = v;
    }
    const Reader r{config, path};
    HfModelSpec s;
    const auto archs = root.find("architectures");
    if (archs == root.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
        r.fail("config.json has no 'architectures' list");
    }
    s.hf_architecture = (*archs)[0].get<std::string>();
    if (s.hf_architecture == "LlamaForCausalLM") {
        s.architecture = "llama";
        s.permute_qk = true;
    } else if (s.hf_architecture == "Qwen2ForCausalLM") {
        s.architecture = "qwen2";
    } else if (s.hf_architecture == "GPT2LMHeadModel") {
        s.architecture = "gpt2";
        s.transpose_conv1d = true;
    } else if (s.hf_architecture == "Gemma3ForCausalLM") {
        s.architecture = "gemma3";
        s.norm_plus_one = true;
    } else if (s.hf_architecture == "MambaForCausalLM") {
        s.architecture = "mamba";
    } else if (s.hf_architecture == "Mamba2ForCausalLM") {
        s.architecture = "mamba2";
    } else if (s.hf_architecture == "GraniteMoeHybridForCausalLM") {
        s.architecture = "granitehybrid";
        s.permute_qk = true;  // GraniteModel is a LlamaModel in the converter (irrelevant without RoPE, but the bytes)
    } else {
        throw Error(ErrorCode::unsupported,
                    path + ": Hugging Face architecture '" + s.hf_architecture +
                        "' is not supported by kvstash yet (supported in a directory: LlamaForCausalLM, "
                        "Qwen2ForCausalLM, GPT2LMHeadModel, Gemma3ForCausalLM, MambaForCausalLM, "
                        "Mamba2ForCausalLM, GraniteMoeHybridForCausalLM; convert others to GGUF with llama.cpp's "
                        "convert_hf_to_gguf.py)");
    }
    const std::string a = s.architecture + ".";
    gguf::Metadata& m = s.metadata;
    auto put_u32 = [&](const std::string& key, int64_t v) {
        m.emplace_back(a + key, gguf::u32_value(static_cast<uint32_t>(v)));
    };
    auto put_f32 = [&](const std::string& key, double v) { m.emplace_back(a + key, gguf::f32_value(v)); };
    m.emplace_back("general.architecture", gguf::string_value(s.architecture));

    s.n_layer = r.require_int({"num_hidden_layers", "n_layer", "num_layers"});
    put_u32("block_count", s.n_layer);
    if (s.architecture == "granitehybrid") {
        read_granite_hybrid(r, config, put_u32, put_f32, s);
        return s;
    }
    if (s.architecture == "mamba2") {
        // Mamba2Model.set_gguf_parameters: time_step_rank is the number of heads, group_count the norm's groups.
        const int64_t n_embd = r.require_int({"hidden_size", "d_model"});
        const int64_t d_inner = r.get_int({"mamba_d_ssm", "intermediate_size", "d_inner"})
                                    .value_or(r.get_int({"expand"}).value_or(2) * n_embd);
        const int64_t head_dim = r.get_int({"mamba_d_head", "head_dim"}).value_or(64);
        s.ssm_group_count = r.get_int({"mamba_n_groups", "n_groups"}).value_or(1);
        put_u32("context_length", int64_t{1} << 20);
        put_u32("embedding_length", n_embd);
        put_u32("feed_forward_length", 0);
        put_u32("attention.head_count", 0);
        put_u32("ssm.conv_kernel", r.get_int({"conv_kernel", "mamba_d_conv", "d_conv"}).value_or(4));
        put_u32("ssm.inner_size", d_inner);
        put_u32("ssm.state_size", r.get_int({"state_size", "mamba_d_state", "d_state"}).value_or(128));
        put_u32("ssm.time_step_rank", r.get_int({"num_heads", "mamba_n_heads"}).value_or(d_inner / head_dim));
        put_u32("ssm.group_count", s.ssm_group_count);
        put_f32("attention.layer_norm_rms_epsilon", r.get_float({"layer_norm_epsilon", "rms_norm_eps"}).value_or(1e-5));
        return s;
    }
    if (s.architecture == "mamba") {
        // MambaModel.set_gguf_parameters: d_inner = expand × d_model (or intermediate_size), dt_rank defaults to
        // ceil(d_model / 16), no attention, context 2^20 (a recurrent model has no trained limit).
        const int64_t n_embd = r.require_int({"hidden_size", "d_model"});
        const int64_t d_inner =
            r.get_int({"intermediate_size", "d_inner"}).value_or(r.get_int({"expand"}).value_or(2) * n_embd);
        put_u32("context_length", int64_t{1} << 20);
        put_u32("embedding_length", n_embd);
        put_u32("feed_forward_length", 0);
        put_u32("attention.head_count", 0);
        put_u32("ssm.conv_kernel", r.get_int({"conv_kernel", "d_conv"}).value_or(4));
        put_u32("ssm.inner_size", d_inner);
        put_u32("ssm.state_size", r.get_int({"state_size", "d_state"}).value_or(16));
        put_u32("ssm.time_step_rank", r.get_int({"time_step_rank", "dt_rank"}).value_or((n_embd + 15) / 16));
        put_f32("attention.layer_norm_rms_epsilon", r.get_float({"layer_norm_epsilon", "rms_norm_eps"}).value_or(1e-5));
        m.emplace_back(a + "ssm.dt_b_c_rms", gguf::bool_value(false));
        return s;
    }
    if (s.architecture == "gpt2") {
        // GPT2Model.set_gguf_parameters: n_ctx (transformers 5 omits it; it equals n_positions), FFN 4 × n_embd.
        const int64_t n_embd = r.require_int({"n_embd"});
        s.n_head = r.require_int({"n_head"});
        s.n_head_kv = s.n_head;
        if (auto inner = r.get_int({"n_inner"}); inner && *inner != 4 * n_embd) {
            throw Error(ErrorCode::unsupported, path + ": gpt2 with n_inner != 4 × n_embd is not supported");
        }
        put_u32("context_length", r.require_int({"n_ctx", "n_positions"}));
        put_u32("embedding_length", n_embd);
        put_u32("feed_forward_length", 4 * n_embd);
        put_u32("attention.head_count", s.n_head);
        put_f32("attention.layer_norm_epsilon", r.get_float({"layer_norm_epsilon"}).value_or(1e-5));
        return s;
    }

    // TextModel.set_gguf_parameters, in its order.
    const bool gemma = s.architecture == "gemma3";
    const auto n_ctx = r.get_int(
        {"max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length", "model_max_length"});
    if (n_ctx || gemma) put_u32("context_length", n_ctx.value_or(131072));
    const int64_t n_embd = r.require_int({"hidden_size", "n_embd", "dim"});
    put_u32("embedding_length", n_embd);
    put_u32("feed_forward_length", r.require_int({"intermediate_size", "n_inner", "hidden_dim"}));
    s.n_head = r.require_int({"num_attention_heads", "n_head", "n_heads"});
    put_u32("attention.head_count", s.n_head);
    const auto n_head_kv = r.get_int({"num_key_value_heads", "n_kv_heads"});
    s.n_head_kv = n_head_kv.value_or(gemma ? 4 : s.n_head);
    if (n_head_kv || gemma) put_u32("attention.head_count_kv", s.n_head_kv);

    const json rope = rope_parameters(config);
    const json& full = rope.contains("full_attention") ? rope["full_attention"] : rope;
    const std::string rope_type = full.value("rope_type", std::string("default"));
    std::string rope_type_lower = rope_type;
    for (char& ch : rope_type_lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (rope_type == "linear") {
        m.emplace_back(a + "rope.scaling.type", gguf::string_value("linear"));
        put_f32("rope.scaling.factor", full.value("factor", 1.0));
    } else if (rope_type_lower == "llama3" && s.architecture == "llama") {
        // LlamaModel.generate_extra_tensors: no metadata key, a rope_freqs.weight tensor (hf_rope_scaling.h).
        auto number = [&](const char* key, double fallback) {
            auto it = full.find(key);
            if (it == full.end() || it->is_null()) return fallback;
            if (!it->is_number()) r.fail(std::string("rope scaling '") + key + "' must be a number");
            return it->get<double>();
        };
        Llama3RopeScaling p;
        p.rope_theta = number("rope_theta", 10000.0);
        const auto head_dim = r.get_int({"head_dim"});
        p.dim = head_dim ? *head_dim : r.require_int({"hidden_size"}) / std::max<int64_t>(1, s.n_head);
        p.factor = number("factor", 8.0);
        p.low_freq_factor = number("low_freq_factor", 1.0);
        p.high_freq_factor = number("high_freq_factor", 4.0);
        p.original_max_position_embeddings = number("original_max_position_embeddings", 8192.0);
        s.rope_freq_factors = llama3_rope_freq_factors(p);
    } else if (rope_type != "default") {
        throw Error(ErrorCode::unsupported,
                    path + ": rope_type '" + rope_type +
                        "' is not supported in a model directory yet (supported: default, linear, and llama3 for "
                        "LlamaForCausalLM); convert the model to GGUF with llama.cpp instead");
    }
    if (auto theta = full.find("rope_theta"); theta != full.end() && theta->is_number()) {
        put_f32("rope.freq_base", theta->get<double>());
    } else if (gemma) {
        put_f32("rope.freq_base", 1000000.0);
    }
    if (rope.contains("sliding_attention") && rope["sliding_attention"].contains("rope_theta")) {
        put_f32("rope.freq_base_swa", rope["sliding_attention"]["rope_theta"].get<double>());
    }
    put_f32("attention.layer_norm_rms_epsilon", r.get_float({"rms_norm_eps", "norm_eps"}).value_or(1e-6));
    const auto head_dim = r.get_int({"head_dim"});
    if (head_dim || gemma) {
        put_u32("attention.key_length", head_dim.value_or(256));
        put_u32("attention.value_length", head_dim.value_or(256));
    }
    if (s.architecture == "llama") {  // LlamaModel.set_gguf_parameters
        put_u32("vocab_size", r.require_int({"vocab_size"}));
        put_u32("rope.dimension_count", head_dim.value_or(n_embd / (s.n_head > 0 ? s.n_head : 1)));
    }
    if (gemma) {  // Gemma3Model.set_gguf_parameters
        if (config.contains("final_logit_softcapping") && !config["final_logit_softcapping"].is_null()) {
            throw Error(ErrorCode::unsupported, path + ": gemma3 models with logit softcapping are not supported yet");
        }
        // kvstash (as llama.cpp) scales Q by 1/sqrt(head_dim), or 1/sqrt(n_embd / n_head) for the 62-layer 27B.
        if (auto scalar = r.get_float({"query_pre_attn_scalar"})) {
            const double expected =
                s.n_layer == 62 ? static_cast<double>(n_embd / s.n_head) : static_cast<double>(head_dim.value_or(256));
            if (*scalar != expected) {
                throw Error(ErrorCode::unsupported, path + ": gemma3 query_pre_attn_scalar " + std::to_string(*scalar) +
                                                        " is not the head dimension; not supported");
            }
        }
        const int64_t pattern = r.get_int({"sliding_window_pattern"}).value_or(6);
        if (pattern != 1) put_u32("attention.sliding_window", r.require_int({"sliding_window"}));
        // llama.cpp assumes every 6th layer global; kvstash reads the same default. A config whose layer_types
        // say otherwise would compute differently under llama.cpp: refuse rather than guess.
        if (auto lt = config.find("layer_types"); lt != config.end() && lt->is_array()) {
            for (size_t il = 0; il < lt->size(); ++il) {
                const bool sliding = (*lt)[il] == "sliding_attention";
                if (sliding != (il % 6 < 5)) {
                    throw Error(ErrorCode::unsupported,
                                path +
                                    ": gemma3 layer_types other than five sliding layers then one global "
                                    "are not supported in a model directory");
                }
            }
        }
    }
    return s;
}

}  // namespace
}  // namespace kvstash
