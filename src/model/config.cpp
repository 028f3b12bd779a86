#include "model/config.h"

#include <string>

#include "format/gguf.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

[[noreturn]] void inconsistent(const std::string& what) {
    throw Error(ErrorCode::bad_format, "inconsistent model hyper-parameters: " + what);
}

}  // namespace

ModelConfig read_model_config(const gguf::File& file) {
    ModelConfig c;
    c.architecture = file.require_string("general.architecture");
    if (c.architecture != "llama") {
        throw Error(ErrorCode::unsupported,
                    "model architecture '" + c.architecture + "' is not supported by kvstash yet (supported: llama)");
    }
    c.name = file.get_string("general.name").value_or("");
    const std::string a = c.architecture + ".";
    c.n_layer = file.require_int(a + "block_count");
    c.n_embd = file.require_int(a + "embedding_length");
    c.n_ff = file.require_int(a + "feed_forward_length");
    c.n_head = file.require_int(a + "attention.head_count");
    c.n_head_kv = file.get_int(a + "attention.head_count_kv").value_or(c.n_head);
    c.n_ctx_train = file.get_int(a + "context_length").value_or(0);
    c.rms_eps = static_cast<float>(file.require_float(a + "attention.layer_norm_rms_epsilon"));
    c.rope.freq_base = static_cast<float>(file.get_float(a + "rope.freq_base").value_or(10000.0));
    if (c.n_layer <= 0 || c.n_embd <= 0 || c.n_ff <= 0 || c.n_head <= 0 || c.n_head_kv <= 0) {
        inconsistent("block_count, embedding_length, feed_forward_length and head counts must be positive");
    }
    if (c.n_head % c.n_head_kv != 0) {
        inconsistent("head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                     std::to_string(c.n_head_kv));
    }
    c.head_dim = file.get_int(a + "attention.key_length").value_or(c.n_embd / c.n_head);
    const int64_t value_length = file.get_int(a + "attention.value_length").value_or(c.head_dim);
    if (value_length != c.head_dim) inconsistent("attention.value_length differs from attention.key_length");
    if (c.head_dim <= 0 || c.head_dim % 2 != 0) inconsistent("head dimension must be positive and even");
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

}  // namespace kvstash
