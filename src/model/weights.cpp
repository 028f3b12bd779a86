#include "model/weights.h"

#include <cstring>
#include <string>

#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/numerics.h"
#include "format/gguf.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

std::string shape_string(const std::vector<int64_t>& dims) {
    std::string s = "{";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "}";
}

// Equal up to trailing dimensions of 1: llama.cpp writes ggml_n_dims() dimensions (llama-quantize turns
// the converter's {2048, 1} ssm_norm into {2048}) and reads either.
bool same_shape(std::vector<int64_t> a, std::vector<int64_t> b) {
    while (a.size() > 1 && a.back() == 1) a.pop_back();
    while (b.size() > 1 && b.back() == 1) b.pop_back();
    return a == b;
}

const gguf::TensorInfo& require_tensor(const gguf::File& file, const std::string& name,
                                       const std::vector<int64_t>& expected_dims) {
    const gguf::TensorInfo* info = file.find_tensor(name);
    if (!info) throw Error(ErrorCode::bad_format, "model has no tensor '" + name + "'");
    if (!same_shape(info->dims, expected_dims)) {
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

// All elements of a tensor of GGUF dims `dims` (any type) as f32, in file order.
std::vector<float> read_f32(const gguf::File& file, const std::string& name, const std::vector<int64_t>& dims) {
    const gguf::TensorInfo& info = require_tensor(file, name, dims);
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    const int64_t block = tensor_type_traits(info.type).block_size;
    if (dims[0] % block != 0) {
        throw Error(ErrorCode::bad_format, "tensor '" + name + "' rows are not a multiple of its block size");
    }
    std::vector<float> v(static_cast<size_t>(n));
    const uint64_t row_bytes = tensor_row_bytes(info.type, dims[0]);
    const uint8_t* data = file.tensor_data(info);
    for (int64_t r = 0; r < n / dims[0]; ++r) {
        dequantize_row(info.type, data + static_cast<uint64_t>(r) * row_bytes, v.data() + r * dims[0], dims[0]);
    }
    return v;
}

void reject_present(const gguf::File& file, const std::string& name) {
    if (file.find_tensor(name)) {
        throw Error(ErrorCode::unsupported, "model has tensor '" + name + "', which kvstash does not apply yet");
    }
}

// A vector the file may or may not have (a bias): empty when absent, checked like any other when present.
std::vector<float> optional_vector(const gguf::File& file, const std::string& name, int64_t n) {
    return file.find_tensor(name) ? read_vector(file, name, n) : std::vector<float>{};
}

// Rows [first, first + rows) of m, as a matrix of its own (the rows are contiguous in the file).
MatrixRef row_block(const MatrixRef& m, const std::string& name, int64_t first, int64_t rows) {
    MatrixRef v = m;
    v.name = name;
    v.data = m.row(first);
    v.rows = rows;
    return v;
}

// A norm's weight, and its bias for LayerNorm (required there; refused for RMSNorm, which has none).
void bind_norm(const gguf::File& file, const std::string& name, const ModelConfig& c, std::vector<float>& weight,
               std::vector<float>& bias) {
    weight = read_vector(file, name + ".weight", c.n_embd);
    if (c.norm == NormKind::layer) {
        bias = read_vector(file, name + ".bias", c.n_embd);
    } else {
        reject_present(file, name + ".bias");
    }
}

void bind_attention(const gguf::File& file, const std::string& p, const ModelConfig& c, LayerWeights& l) {
    const int64_t nq = c.n_embd_q();
    const int64_t nkv = c.n_embd_kv();
    if (file.find_tensor(p + "attn_qkv.weight")) {
        // Fused Q | K | V rows (gpt2; llama.cpp's create_tensor_qkv accepts it for any family).
        const MatrixRef qkv = bind_matrix(file, p + "attn_qkv.weight", nq + 2 * nkv, c.n_embd);
        l.wq = row_block(qkv, p + "attn_qkv.weight[q]", 0, nq);
        l.wk = row_block(qkv, p + "attn_qkv.weight[k]", nq, nkv);
        l.wv = row_block(qkv, p + "attn_qkv.weight[v]", nq + nkv, nkv);
        const std::vector<float> b = optional_vector(file, p + "attn_qkv.bias", nq + 2 * nkv);
        if (!b.empty()) {
            l.bq.assign(b.begin(), b.begin() + nq);
            l.bk.assign(b.begin() + nq, b.begin() + nq + nkv);
            l.bv.assign(b.begin() + nq + nkv, b.end());
        }
        for (const char* part : {"attn_q.weight", "attn_k.weight", "attn_v.weight"}) reject_present(file, p + part);
    } else {
        l.wq = bind_matrix(file, p + "attn_q.weight", nq, c.n_embd);
        l.wk = bind_matrix(file, p + "attn_k.weight", nkv, c.n_embd);
        l.wv = bind_matrix(file, p + "attn_v.weight", nkv, c.n_embd);
        l.bq = optional_vector(file, p + "attn_q.bias", nq);  // qwen2
        l.bk = optional_vector(file, p + "attn_k.bias", nkv);
        l.bv = optional_vector(file, p + "attn_v.bias", nkv);
    }
    l.wo = bind_matrix(file, p + "attn_output.weight", c.n_embd, nq);
    l.bo = optional_vector(file, p + "attn_output.bias", c.n_embd);  // gpt2
    if (c.family == ModelFamily::gemma3) {
        l.attn_q_norm = read_vector(file, p + "attn_q_norm.weight", c.head_dim);
        l.attn_k_norm = read_vector(file, p + "attn_k_norm.weight", c.head_dim);
        l.attn_post_norm = read_vector(file, p + "post_attention_norm.weight", c.n_embd);
    } else {
        for (const char* t : {"attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight"}) {
            reject_present(file, p + t);
        }
    }
}

void bind_ffn(const gguf::File& file, const std::string& p, const ModelConfig& c, LayerWeights& l) {
    bind_norm(file, p + "ffn_norm", c, l.ffn_norm, l.ffn_norm_b);
    if (c.ffn != FfnKind::gelu) {
        l.w_gate = bind_matrix(file, p + "ffn_gate.weight", c.n_ff, c.n_embd);
    } else {
        reject_present(file, p + "ffn_gate.weight");
    }
    l.w_up = bind_matrix(file, p + "ffn_up.weight", c.n_ff, c.n_embd);
    l.w_down = bind_matrix(file, p + "ffn_down.weight", c.n_embd, c.n_ff);
    l.b_up = optional_vector(file, p + "ffn_up.bias", c.n_ff);
    l.b_down = optional_vector(file, p + "ffn_down.bias", c.n_embd);
    if (c.family == ModelFamily::gemma3) {
        l.ffn_post_norm = read_vector(file, p + "post_ffw_norm.weight", c.n_embd);
    } else {
        reject_present(file, p + "post_ffw_norm.weight");
    }
    for (const char* t : {"ffn_gate.bias", "ffn_gate_inp.weight"}) reject_present(file, p + t);
}

// Q5_0 block (fp16 d, 32 fifth bits, 16 nibble bytes) -> Q8_0 block (the same fp16 d, 32 int8 q - 16):
// d * (q - 16) is the same float either way.
void repack_q5_0_block(const uint8_t* src, uint8_t* dst) {
    std::memcpy(dst, src, 2);
    uint32_t qh;
    std::memcpy(&qh, src + 2, 4);
    const uint8_t* qs = src + 6;
    auto* q = reinterpret_cast<int8_t*>(dst + 2);
    for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<int8_t>(static_cast<int>((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4)) - 16);
        q[j + 16] = static_cast<int8_t>(static_cast<int>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16);
    }
}

// Whether the layers' Q5_0 matrices stay as stored: where matmul reads q5_0 itself (AVX2: the q8_0 kernels on
// 22-byte blocks, the same bits as the repacked matrix; backends/cpu/matmul/quantize_act.h). A bad KVSTASH_ISA:
// repacked, and the first matmul reports it.
bool q5_0_computed() {
    try {
        return !is_cuda_path(current_numerics().path) && matmul_reads_q5_0(active_isa());
    } catch (const Error&) {
        return false;
    }
}

void repack_q5_0(MatrixRef& m, std::vector<std::vector<uint8_t>>& store) {
    if (m.type != kTensorTypeQ5_0) return;
    const int64_t blocks = m.rows * (m.cols / 32);
    std::vector<uint8_t> out(static_cast<size_t>(blocks) * 34);
    // Rows are whole blocks, so the blocks of all rows are consecutive in both layouts.
    const auto* src = static_cast<const uint8_t*>(m.data);
    for (int64_t b = 0; b < blocks; ++b) repack_q5_0_block(src + b * 22, out.data() + b * 34);
    m.type = TensorType::Q8_0;
    m.row_bytes = tensor_row_bytes(TensorType::Q8_0, m.cols);
    m.data = out.data();
    store.push_back(std::move(out));  // the heap buffer moves, its address stays
}

// Shapes as llama.cpp's loaders (src/models/mamba*.cpp, granite-hybrid.cpp) create them.
void bind_ssm(const gguf::File& file, const std::string& p, const SsmConfig& s, int64_t n_embd, LayerWeights& l) {
    l.ssm_in = bind_matrix(file, p + "ssm_in.weight", s.d_in_proj(), n_embd);
    l.ssm_conv1d = read_f32(file, p + "ssm_conv1d.weight", {s.d_conv, s.conv_channels()});
    if (file.find_tensor(p + "ssm_conv1d.bias")) {
        l.ssm_conv1d_b = read_f32(file, p + "ssm_conv1d.bias", {s.conv_channels()});
    }
    l.ssm_out = bind_matrix(file, p + "ssm_out.weight", n_embd, s.d_inner);
    if (s.mamba2) {
        l.ssm_dt_b = read_f32(file, p + "ssm_dt.bias", {s.n_head});
        l.ssm_a = read_f32(file, p + "ssm_a", {1, s.n_head});
        l.ssm_d = read_f32(file, p + "ssm_d", {1, s.n_head});
        l.ssm_norm = read_f32(file, p + "ssm_norm.weight", {s.d_inner / s.n_group, s.n_group});
    } else {
        l.ssm_x = bind_matrix(file, p + "ssm_x.weight", s.dt_rank + 2 * s.d_state, s.d_inner);
        l.ssm_dt = bind_matrix(file, p + "ssm_dt.weight", s.d_inner, s.dt_rank);
        l.ssm_dt_b = read_f32(file, p + "ssm_dt.bias", {s.d_inner});
        l.ssm_a = read_f32(file, p + "ssm_a", {s.d_state, s.d_inner});
        l.ssm_d = read_f32(file, p + "ssm_d", {s.d_inner});
    }
}

uint64_t bytes_of(const MatrixRef& m) { return m.data ? m.row_bytes * static_cast<uint64_t>(m.rows) : 0; }

}  // namespace

ModelWeights bind_weights(const gguf::File& file, const ModelConfig& c) {
    ModelWeights w;
    w.token_embd = bind_matrix(file, "token_embd.weight", c.n_vocab, c.n_embd);
    if (c.learned_positions) w.position_embd = bind_matrix(file, "position_embd.weight", c.n_ctx_train, c.n_embd);
    bind_norm(file, "output_norm", c, w.output_norm, w.output_norm_b);
    w.output = c.tied_output ? w.token_embd : bind_matrix(file, "output.weight", c.n_vocab, c.n_embd);
    reject_present(file, "output.bias");
    if (c.rope.has_freq_factors) w.rope_freqs = read_vector(file, "rope_freqs.weight", c.rope.n_rot / 2);
    w.layers.resize(static_cast<size_t>(c.n_layer));
    const bool keep_q5_0 = q5_0_computed();
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        LayerWeights& l = w.layers[static_cast<size_t>(il)];
        bind_norm(file, p + "attn_norm", c, l.attn_norm, l.attn_norm_b);
        if (c.is_recurrent(il)) {
            bind_ssm(file, p, c.ssm, c.n_embd, l);
        } else {
            bind_attention(file, p, c, l);
        }
        if (c.has_ffn()) bind_ffn(file, p, c, l);
        for (MatrixRef* m :
             {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.ssm_in, &l.ssm_x, &l.ssm_dt, &l.ssm_out}) {
            if (!keep_q5_0) repack_q5_0(*m, w.repacked);
            w.matrix_bytes += bytes_of(*m);
        }
    }
    const bool output_is_embd = w.output.data == w.token_embd.data;
    repack_q5_0(w.token_embd, w.repacked);
    if (output_is_embd) {
        w.output = w.token_embd;
    } else {
        repack_q5_0(w.output, w.repacked);
    }
    repack_q5_0(w.position_embd, w.repacked);
    w.matrix_bytes += bytes_of(w.output);
    return w;
}

}  // namespace kvstash
