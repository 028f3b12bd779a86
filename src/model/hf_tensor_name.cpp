#include "model/hf_tensor_name.h"

#include <cctype>
#include <utility>

#include "kvstash/error.h"

namespace kvstash {
namespace {

using Pair = std::pair<const char*, const char*>;

// Per-layer suffixes (after "<layers>.N.").
constexpr Pair kLlamaLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},      {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"}, {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},          {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},     {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},       {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};
constexpr Pair kGemma3Layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};
constexpr Pair kGpt2Layer[] = {
    {"ln_1.weight", "attn_norm.weight"},          {"ln_1.bias", "attn_norm.bias"},
    {"attn.c_attn.weight", "attn_qkv.weight"},    {"attn.c_attn.bias", "attn_qkv.bias"},
    {"attn.c_proj.weight", "attn_output.weight"}, {"attn.c_proj.bias", "attn_output.bias"},
    {"ln_2.weight", "ffn_norm.weight"},           {"ln_2.bias", "ffn_norm.bias"},
    {"mlp.c_fc.weight", "ffn_up.weight"},         {"mlp.c_fc.bias", "ffn_up.bias"},
    {"mlp.c_proj.weight", "ffn_down.weight"},     {"mlp.c_proj.bias", "ffn_down.bias"},
};
// MambaForCausalLM and Mamba2ForCausalLM (after "backbone.layers.N."): A_log becomes ssm_a = -exp(A_log) and conv1d's
// [d_inner, 1, k] weight [d_inner, k] in hf_dir.cpp, as the converter does.
constexpr Pair kMambaLayer[] = {
    {"norm.weight", "attn_norm.weight"},
    {"mixer.in_proj.weight", "ssm_in.weight"},
    {"mixer.x_proj.weight", "ssm_x.weight"},
    {"mixer.dt_proj.weight", "ssm_dt.weight"},
    {"mixer.dt_proj.bias", "ssm_dt.bias"},
    {"mixer.out_proj.weight", "ssm_out.weight"},
    {"mixer.conv1d.weight", "ssm_conv1d.weight"},
    {"mixer.conv1d.bias", "ssm_conv1d.bias"},
    {"mixer.A_log", "ssm_a"},
    {"mixer.D", "ssm_d"},
    {"mixer.dt_bias", "ssm_dt.bias"},          // Mamba 2
    {"mixer.norm.weight", "ssm_norm.weight"},  // Mamba 2's gated norm
};
// GraniteMoeHybridForCausalLM (after "model.layers.N."): shared_mlp.input_linear holds gate then up rows; hf_dir.cpp
// splits "ffn_gate_up.weight" into ffn_gate.weight and ffn_up.weight, as the converter does.
constexpr Pair kGraniteHybridLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"mamba.in_proj.weight", "ssm_in.weight"},
    {"mamba.out_proj.weight", "ssm_out.weight"},
    {"mamba.conv1d.weight", "ssm_conv1d.weight"},
    {"mamba.conv1d.bias", "ssm_conv1d.bias"},
    {"mamba.dt_bias", "ssm_dt.bias"},
    {"mamba.A_log", "ssm_a"},
    {"mamba.D", "ssm_d"},
    {"mamba.norm.weight", "ssm_norm.weight"},
    {"shared_mlp.input_linear.weight", "ffn_gate_up.weight"},
    {"shared_mlp.output_linear.weight", "ffn_down.weight"},
};
constexpr Pair kMambaTop[] = {
    {"embeddings.weight", "token_embd.weight"},
    {"norm_f.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};
constexpr Pair kLlamaTop[] = {
    {"embed_tokens.weight", "token_embd.weight"},
    {"norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};
constexpr Pair kGpt2Top[] = {
    {"wte.weight", "token_embd.weight"}, {"wpe.weight", "position_embd.weight"}, {"ln_f.weight", "output_norm.weight"},
    {"ln_f.bias", "output_norm.bias"},   {"lm_head.weight", "output.weight"},
};

template <size_t N>
const char* lookup(const Pair (&table)[N], const std::string& key) {
    for (const Pair& p : table) {
        if (key == p.first) return p.second;
    }
    return nullptr;
}

bool strip_prefix(std::string& s, const std::string& prefix) {
    if (s.rfind(prefix, 0) != 0) return false;
    s.erase(0, prefix.size());
    return true;
}

}  // namespace

std::optional<std::string> gguf_tensor_name(const HfModelSpec& spec, const std::string& hf_name) {
    const bool gpt2 = spec.architecture == "gpt2";
    const bool mamba = spec.architecture == "mamba" || spec.architecture == "mamba2";
    std::string name = hf_name;
    if (name.ends_with("rotary_emb.inv_freq") ||
        (gpt2 && (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias")))) {
        return std::nullopt;
    }
    if (name != "lm_head.weight") {
        if (gpt2) {
            strip_prefix(name, "transformer.");
        } else if (mamba) {
            strip_prefix(name, "backbone.");
        } else if (!strip_prefix(name, "model.language_model.")) {
            strip_prefix(name, "model.");
        }
    }
    const std::string layers = gpt2 ? "h." : "layers.";
    if (strip_prefix(name, layers)) {
        size_t digits = 0;
        while (digits < name.size() && std::isdigit(static_cast<unsigned char>(name[digits]))) ++digits;
        if (digits > 0 && digits < 7 && digits < name.size() && name[digits] == '.') {
            const int64_t layer = std::stoll(name.substr(0, digits));
            const std::string rest = name.substr(digits + 1);
            const char* mapped = gpt2                                   ? lookup(kGpt2Layer, rest)
                                 : mamba                                ? lookup(kMambaLayer, rest)
                                 : spec.architecture == "granitehybrid" ? lookup(kGraniteHybridLayer, rest)
                                 : spec.architecture == "gemma3"        ? lookup(kGemma3Layer, rest)
                                                                        : lookup(kLlamaLayer, rest);
            if (mapped && layer < spec.n_layer) return "blk." + std::to_string(layer) + "." + mapped;
        }
    } else if (const char* mapped = gpt2    ? lookup(kGpt2Top, name)
                                    : mamba ? lookup(kMambaTop, name)
                                            : lookup(kLlamaTop, name)) {
        return std::string(mapped);
    }
    throw Error(ErrorCode::unsupported, "tensor '" + hf_name + "' of a " + spec.hf_architecture +
                                            " checkpoint is not one kvstash knows how to load");
}

}  // namespace kvstash
