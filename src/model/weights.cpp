#include "model/weights.h"

#include <string>

#include "format/gguf.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

std::string shape_string(const std::vector<int64_t>& dims) {
    std::string s = "{";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "}";
}

const gguf::TensorInfo& require_tensor(const gguf::File& file, const std::string& name,
                                       const std::vector<int64_t>& expected_dims) {
    const gguf::TensorInfo* info = file.find_tensor(name);
    if (!info) throw Error(ErrorCode::bad_format, "model has no tensor '" + name + "'");
    if (info->dims != expected_dims) {
        throw Error(ErrorCode::bad_format, "tensor '" + name + "' has shape " + shape_string(info->dims) +
                                               ", expected " + shape_string(expected_dims));
    }
    return *info;
}

// GGUF dims {cols, rows}: dims[0] is the contiguous dimension.
MatrixRef bind_matrix(const gguf::File& file, const std::string& name, int64_t rows, int64_t cols) {
    const gguf::TensorInfo& info = require_tensor(file, name, {cols, rows});
    MatrixRef m;
    m.name = name;
    m.type = info.type;
    m.data = file.tensor_data(info);
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = tensor_row_bytes(info.type, cols);
    return m;
}

std::vector<float> read_vector(const gguf::File& file, const std::string& name, int64_t n) {
    const gguf::TensorInfo& info = require_tensor(file, name, {n});
    if (tensor_type_traits(info.type).block_size != 1 && n % tensor_type_traits(info.type).block_size != 0) {
        throw Error(ErrorCode::bad_format, "tensor '" + name + "' length is not a multiple of its block size");
    }
    std::vector<float> v(static_cast<size_t>(n));
    dequantize_row(info.type, file.tensor_data(info), v.data(), n);
    return v;
}

}  // namespace

ModelWeights bind_llama_weights(const gguf::File& file, const ModelConfig& c) {
    ModelWeights w;
    w.token_embd = bind_matrix(file, "token_embd.weight", c.n_vocab, c.n_embd);
    w.output_norm = read_vector(file, "output_norm.weight", c.n_embd);
    w.output = c.tied_output ? w.token_embd : bind_matrix(file, "output.weight", c.n_vocab, c.n_embd);
    if (c.rope.has_freq_factors) w.rope_freqs = read_vector(file, "rope_freqs.weight", c.rope.n_rot / 2);
    w.layers.resize(static_cast<size_t>(c.n_layer));
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        LayerWeights& l = w.layers[static_cast<size_t>(il)];
        l.attn_norm = read_vector(file, p + "attn_norm.weight", c.n_embd);
        l.wq = bind_matrix(file, p + "attn_q.weight", c.n_embd_q(), c.n_embd);
        l.wk = bind_matrix(file, p + "attn_k.weight", c.n_embd_kv(), c.n_embd);
        l.wv = bind_matrix(file, p + "attn_v.weight", c.n_embd_kv(), c.n_embd);
        l.wo = bind_matrix(file, p + "attn_output.weight", c.n_embd, c.n_embd_q());
        l.ffn_norm = read_vector(file, p + "ffn_norm.weight", c.n_embd);
        l.w_gate = bind_matrix(file, p + "ffn_gate.weight", c.n_ff, c.n_embd);
        l.w_up = bind_matrix(file, p + "ffn_up.weight", c.n_ff, c.n_embd);
        l.w_down = bind_matrix(file, p + "ffn_down.weight", c.n_embd, c.n_ff);
        for (const MatrixRef* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
            w.matrix_bytes += m->row_bytes * static_cast<uint64_t>(m->rows);
        }
    }
    w.matrix_bytes += w.output.row_bytes * static_cast<uint64_t>(w.output.rows);
    return w;
}

}  // namespace kvstash
