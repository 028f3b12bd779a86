#include "model/hf_dir.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "base/json_depth.h"
#include "base/regular_file.h"
#include "format/quantize.h"
#include "format/safetensors.h"
#include "kvstash/error.h"
#include "model/hf_config.h"
#include "model/hf_tensor_name.h"
#include "tokenizer/vocabulary_hf.h"

namespace kvstash {
namespace {

using nlohmann::json;

bool is_file(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The file's text, nullopt when there is nothing at `path`; a FIFO or device there is refused (base/regular_file).
std::optional<std::string> read_text(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
    return regular_file::read_all(path, "model directory file");
}

json read_json(const std::string& path) {
    const auto text = read_text(path);
    if (!text) throw Error(ErrorCode::bad_format, "model directory has no '" + path + "'");
    json_depth::require_depth_at_most(*text, "'" + path + "'", ErrorCode::bad_format);
    json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw Error(ErrorCode::bad_format, "'" + path + "' is not valid JSON");
    return j;
}

// What the assembled gguf::File keeps alive: the mapped shards and the tensors made at load.
struct Storage {
    std::vector<std::unique_ptr<safetensors::File>> shards;
    std::vector<std::vector<uint8_t>> owned;
};

uint64_t element_size(TensorType t) { return t == TensorType::F32 ? 4 : 2; }

// llama.cpp's LlamaModel.permute: within each head, rows (half j, index i) -> row 2i + j, i.e. HF's
// rotate-half layout (first half, second half) to GGUF's interleaved pairs. `rows` × `row_bytes`.
void permute_rows(const uint8_t* src, uint8_t* dst, int64_t rows, uint64_t row_bytes, int64_t n_head) {
    const int64_t head_rows = rows / n_head;
    const int64_t half = head_rows / 2;
    for (int64_t h = 0; h < n_head; ++h) {
        for (int64_t i = 0; i < half; ++i) {
            for (int64_t j = 0; j < 2; ++j) {
                const int64_t from = h * head_rows + j * half + i;
                const int64_t to = h * head_rows + 2 * i + j;
                std::memcpy(dst + to * row_bytes, src + from * row_bytes, row_bytes);
            }
        }
    }
}

}  // namespace

bool is_model_directory(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::unique_ptr<gguf::File> open_hf_directory(const std::string& dir_in, LoadQuantization quantize) {
    std::string dir = dir_in;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    const json config = read_json(dir + "/config.json");
    const HfModelSpec spec = read_hf_config(config, dir + "/config.json");
    auto storage = std::make_shared<Storage>();
    size_t total_size = 0;

    // The tensors: one file, or the shards an index names (each opened once).
    std::vector<std::pair<std::string, size_t>> names;  // HF tensor name -> shard
    if (is_file(dir + "/model.safetensors.index.json")) {
        const json index = read_json(dir + "/model.safetensors.index.json");
        if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
            throw Error(ErrorCode::bad_format, dir + "/model.safetensors.index.json has no 'weight_map' object");
        }
        std::map<std::string, size_t> shard_of_file;
        for (const auto& [name, file] : index["weight_map"].items()) {
            if (!file.is_string())
                throw Error(ErrorCode::bad_format, "weight_map entry '" + name + "' is not a file name");
            const std::string f = file.get<std::string>();
            if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
                throw Error(ErrorCode::bad_format, "weight_map names '" + f + "', not a file in the model directory");
            }
            auto [it, inserted] = shard_of_file.emplace(f, storage->shards.size());
            if (inserted) {
                storage->shards.push_back(safetensors::File::open(dir + "/" + f));
                total_size += storage->shards.back()->size();
            }
            names.emplace_back(name, it->second);
        }
        for (size_t s = 0; s < storage->shards.size(); ++s) {
            for (const safetensors::TensorInfo& t : storage->shards[s]->tensors()) {
                auto it = index["weight_map"].find(t.name);
                if (it == index["weight_map"].end() || shard_of_file.at(it->get<std::string>()) != s) {
                    throw Error(ErrorCode::bad_format, storage->shards[s]->path() + " holds tensor '" + t.name +
                                                           "', which the index does not place there");
                }
            }
        }
    } else if (is_file(dir + "/model.safetensors")) {
        storage->shards.push_back(safetensors::File::open(dir + "/model.safetensors"));
        total_size += storage->shards.back()->size();
        for (const safetensors::TensorInfo& t : storage->shards[0]->tensors()) names.emplace_back(t.name, 0);
    } else {
        throw Error(ErrorCode::bad_format,
                    "model directory '" + dir + "' has neither model.safetensors nor model.safetensors.index.json");
    }

    // The tokenizer (its rows count caps gemma3's token_embd, as the converter does).
    const json tokenizer = read_json(dir + "/tokenizer.json");
    const std::optional<json> tokenizer_config = is_file(dir + "/tokenizer_config.json")
                                                     ? std::optional<json>(read_json(dir + "/tokenizer_config.json"))
                                                     : std::nullopt;
    gguf::Metadata metadata = spec.metadata;
    for (auto& kv : tokenizer_metadata_from_hf(tokenizer, tokenizer_config ? &*tokenizer_config : nullptr, config,
                                               read_text(dir + "/chat_template.jinja"), dir)) {
        metadata.push_back(std::move(kv));
    }
    metadata.emplace_back("general.name", gguf::string_value(dir.substr(dir.find_last_of('/') + 1)));

    std::vector<gguf::TensorInfo> infos;
    std::vector<const uint8_t*> bytes;
    for (const auto& [hf_name, shard_index] : names) {
        const safetensors::File& shard = *storage->shards[shard_index];
        const safetensors::TensorInfo* t = shard.find_tensor(hf_name);
        if (!t)
            throw Error(ErrorCode::bad_format,
                        shard.path() + " has no tensor '" + hf_name + "' (the index says it does)");
        const std::optional<std::string> name = gguf_tensor_name(spec, hf_name);
        if (!name) continue;  // buffers the converter drops (rotary inv_freq, GPT-2's attention mask)
        // Mamba's conv1d weight [d_inner, 1, k] is read as [d_inner, k] (the converter squeezes it).
        const bool squeeze = t->shape.size() == 3 && t->shape[1] == 1 && name->ends_with("ssm_conv1d.weight");
        if (t->shape.empty() || (t->shape.size() > 2 && !squeeze)) {
            throw Error(ErrorCode::unsupported, "tensor '" + hf_name + "' has " + std::to_string(t->shape.size()) +
                                                    " dimensions; kvstash reads 1-D and 2-D tensors");
        }
        if (t->n_elements() == 0) throw Error(ErrorCode::bad_format, "tensor '" + hf_name + "' is empty");
        std::vector<int64_t> shape = t->shape;  // row-major
        if (squeeze) shape = {t->shape[0], t->shape[2]};
        if (spec.ssm_group_count > 0 && shape.size() == 1) {
            // The converter writes A and D per head as [n_head, 1], the gated norm as [n_group, d_inner / n_group].
            if (name->ends_with(".ssm_a") || name->ends_with(".ssm_d")) shape = {shape[0], 1};
            if (name->ends_with(".ssm_norm.weight")) {
                const int64_t groups = spec.ssm_group_count;
                if (groups <= 0 || shape[0] % groups != 0) {
                    throw Error(ErrorCode::bad_format, "tensor '" + hf_name + "' does not split into n_groups");
                }
                shape = {groups, shape[0] / groups};
            }
        }
        const uint8_t* src = shard.tensor_data(*t);
        const uint64_t esize = element_size(t->type);
        int64_t rows = shape[0];
        const int64_t cols = shape.size() == 2 ? shape[1] : 1;
        if (spec.architecture == "gemma3" && *name == "token_embd.weight") {
            // The converter keeps len(vocab) + len(added_tokens) rows: the first rows, still mapped.
            const int64_t real =
                static_cast<int64_t>(tokenizer["model"]["vocab"].size() +
                                     (tokenizer.contains("added_tokens") ? tokenizer["added_tokens"].size() : 0));
            if (real < rows) rows = shape[0] = real;
        }
        const bool to_f32 = shape.size() == 1 || name->ends_with("_norm.weight") || *name == "position_embd.weight" ||
                            !name->ends_with(".weight");
        const bool permute =
            spec.permute_qk && (name->starts_with("blk.") && (name->find(".attn_q.") != std::string::npos ||
                                                              name->find(".attn_k.") != std::string::npos));
        const bool transpose = spec.transpose_conv1d && shape.size() == 2 &&
                               (hf_name.ends_with("c_attn.weight") || hf_name.ends_with("c_proj.weight") ||
                                hf_name.ends_with("c_fc.weight"));
        const bool plus_one = spec.norm_plus_one && hf_name.ends_with("norm.weight");
        // Mamba: the converter stores A = -exp(A_log) (in f32, as torch computes it).
        const bool negative_exp =
            (spec.architecture == "mamba" || spec.ssm_group_count > 0) && name->ends_with(".ssm_a");
        const uint8_t* data = src;
        if (permute || transpose) {
            std::vector<uint8_t> out(static_cast<size_t>(t->n_bytes));
            if (permute) {
                const int64_t heads = name->find(".attn_q.") != std::string::npos ? spec.n_head : spec.n_head_kv;
                if (heads <= 0 || rows % (2 * heads) != 0) {
                    throw Error(ErrorCode::bad_format, "tensor '" + hf_name + "' rows are not a multiple of 2 × heads");
                }
                permute_rows(src, out.data(), rows, static_cast<uint64_t>(cols) * esize, heads);
            } else {
                // (in, out) -> (out, in)
                for (int64_t r = 0; r < shape[0]; ++r) {
                    for (int64_t c = 0; c < shape[1]; ++c) {
                        std::memcpy(out.data() + (c * shape[0] + r) * esize, src + (r * shape[1] + c) * esize, esize);
                    }
                }
                std::swap(shape[0], shape[1]);
            }
            storage->owned.push_back(std::move(out));
            data = storage->owned.back().data();
        }
        TensorType type = t->type;
        const int64_t n = static_cast<int64_t>(shape.size() == 2 ? shape[0] * shape[1] : shape[0]);
        if (to_f32 && (type != TensorType::F32 || plus_one || negative_exp)) {
            std::vector<uint8_t> out(static_cast<size_t>(n) * 4);
            auto* f = reinterpret_cast<float*>(out.data());
            dequantize_row(type, data, f, n);
            if (plus_one) {
                for (int64_t i = 0; i < n; ++i) {
                    // The converter adds 1 in the tensor's torch dtype: f16 stays f16 (one rounding), bf16 was
                    // widened to f32 first.
                    f[i] = type == TensorType::F16 ? fp16_to_fp32(fp32_to_fp16(f[i] + 1.0f)) : f[i] + 1.0f;
                }
            }
            if (negative_exp) {
                for (int64_t i = 0; i < n; ++i) f[i] = -std::exp(f[i]);
            }
            storage->owned.push_back(std::move(out));
            data = storage->owned.back().data();
            type = TensorType::F32;
        }
        if (!to_f32 && quantize != LoadQuantization::none) {
            // q8_0: gguf-py's q8_0 is ggml's reference quantizer (quantize_row_q8_0 follows it); a row that is not
            // whole blocks falls back to f16 in the converter, and here. q4_K: ggml's quantize_row_q4_K_ref for rows
            // of whole 256-blocks; other rows take the q8_0 rule.
            const int64_t row_len = shape.back();
            const int64_t n_rows = n / row_len;
            TensorType out_type = row_len % 32 == 0 ? TensorType::Q8_0 : TensorType::F16;
            if (quantize == LoadQuantization::q4_K && row_len % 256 == 0) out_type = TensorType::Q4_K;
            const uint64_t out_row = tensor_row_bytes(out_type, row_len);
            std::vector<uint8_t> out(static_cast<size_t>(out_row * static_cast<uint64_t>(n_rows)));
            std::vector<float> row(static_cast<size_t>(row_len));
            const uint64_t in_row = static_cast<uint64_t>(row_len) * element_size(type);
            for (int64_t r = 0; r < n_rows; ++r) {
                dequantize_row(type, data + static_cast<uint64_t>(r) * in_row, row.data(), row_len);
                uint8_t* dst = out.data() + static_cast<uint64_t>(r) * out_row;
                if (out_type == TensorType::Q4_K) {
                    quantize_row_q4_K(row.data(), dst, row_len);
                } else if (out_type == TensorType::Q8_0) {
                    quantize_row_q8_0(row.data(), dst, row_len);
                } else {
                    for (int64_t i = 0; i < row_len; ++i) {
                        const uint16_t h = fp32_to_fp16(row[static_cast<size_t>(i)]);
                        std::memcpy(dst + 2 * i, &h, 2);
                    }
                }
            }
            storage->owned.push_back(std::move(out));
            data = storage->owned.back().data();
            type = out_type;
        }
        // Granite's shared MLP: gate rows then up rows in one matrix, two tensors in the GGUF (no copy: each
        // half is a contiguous run of rows).
        const bool gate_up = name->ends_with(".ffn_gate_up.weight");
        if (gate_up && (shape.size() != 2 || shape[0] % 2 != 0)) {
            throw Error(ErrorCode::bad_format, "tensor '" + hf_name + "' does not split into gate and up halves");
        }
        const int64_t parts = gate_up ? 2 : 1;
        const int64_t part_rows = shape[0] / parts;
        const uint64_t row_bytes = tensor_row_bytes(type, shape.back());
        for (int64_t part = 0; part < parts; ++part) {
            std::vector<int64_t> part_shape = shape;
            if (gate_up) part_shape[0] = part_rows;
            const int64_t part_n = n / parts;
            gguf::TensorInfo info;
            info.name = !gate_up ? *name
                                 : name->substr(0, name->size() - std::string("gate_up.weight").size()) +
                                       (part == 0 ? "gate.weight" : "up.weight");
            info.dims.assign(part_shape.rbegin(), part_shape.rend());  // ggml order: contiguous dimension first
            info.type = type;
            info.raw_type = static_cast<uint32_t>(type);
            info.offset = 0;
            info.n_bytes = row_bytes * static_cast<uint64_t>(part_n / shape.back());
            infos.push_back(std::move(info));
            bytes.push_back(data + static_cast<uint64_t>(part * part_rows) * row_bytes);
        }
    }
    if (!spec.rope_freq_factors.empty()) {
        // Llama 3.1 rope scaling: the tensor the converter generates (hf_rope_scaling.h), F32 as it writes it.
        const size_t n = spec.rope_freq_factors.size();
        std::vector<uint8_t> out(n * sizeof(float));
        std::memcpy(out.data(), spec.rope_freq_factors.data(), out.size());
        storage->owned.push_back(std::move(out));
        gguf::TensorInfo info;
        info.name = "rope_freqs.weight";
        info.dims = {static_cast<int64_t>(n)};
        info.type = TensorType::F32;
        info.raw_type = static_cast<uint32_t>(TensorType::F32);
        info.offset = 0;
        info.n_bytes = n * sizeof(float);
        infos.push_back(std::move(info));
        bytes.push_back(storage->owned.back().data());
    }
    return gguf::File::assemble(dir, std::move(metadata), std::move(infos), std::move(bytes), storage, total_size);
}

}  // namespace kvstash
