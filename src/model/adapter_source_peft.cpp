// read_peft_lora: PEFT's LoRA as save_pretrained writes it (adapter_config.json + adapter_model.safetensors),
// read as llama.cpp's convert_lora_to_gguf.py reads it, so the pairs are the converted GGUF LoRA's exactly.
// PEFT's lora_A / lora_B are nn.Linear weights whatever fan_in_fan_out says (that flag only describes the base
// layer), so A is r × n_in and B is n_out × r as stored, already the LoraSourcePair layout.
#include <sys/stat.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/json_depth.h"
#include "base/regular_file.h"
#include "format/safetensors.h"
#include "kvstash/error.h"
#include "model/adapter_source.h"
#include "model/config.h"
#include "model/hf_config.h"
#include "model/hf_tensor_name.h"

namespace kvstash {
namespace {

using nlohmann::json;

// What the pairs point into: the mapped safetensors file and the permuted lora_B copies.
struct PeftStorage {
    std::string config_text;
    std::unique_ptr<safetensors::File> file;
    std::vector<std::vector<uint8_t>> owned;
};

bool exists(const std::string& path, bool want_dir) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

std::string parent_dir(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

// The options of adapter_config.json that change the arithmetic; anything kvstash does not compute is refused
// rather than silently applied differently. Returns lora_alpha; sets `rank` to r.
float read_config(const std::string& text, const std::string& path, int64_t& rank) {
    json_depth::require_depth_at_most(text, path, ErrorCode::bad_format);
    json c;
    try {
        c = json::parse(text);
    } catch (const json::exception& e) {
        throw Error(ErrorCode::bad_format, path + " is not valid JSON: " + e.what());
    }
    if (!c.is_object()) throw Error(ErrorCode::bad_format, path + " is not a JSON object");
    const auto refuse = [&](const std::string& what) {
        throw Error(ErrorCode::unsupported, path + ": " + what + " is not supported (kvstash applies plain LoRA)");
    };
    if (auto t = c.find("peft_type"); t != c.end() && !(t->is_string() && t->get<std::string>() == "LORA"))
        refuse("peft_type " + t->dump());
    if (c.value("use_dora", false)) refuse("use_dora (DoRA)");
    if (c.value("use_rslora", false)) refuse("use_rslora (scale lora_alpha / sqrt(r))");
    if (c.value("lora_bias", false)) refuse("lora_bias");
    if (auto b = c.find("bias"); b != c.end() && !b->is_null() && !(b->is_string() && *b == "none"))
        refuse("bias " + b->dump());
    for (const char* key : {"rank_pattern", "alpha_pattern"}) {
        if (auto p = c.find(key); p != c.end() && !p->is_null() && !p->empty()) refuse(std::string(key));
    }
    for (const char* key : {"layer_replication", "trainable_token_indices"}) {
        if (auto p = c.find(key); p != c.end() && !p->is_null()) refuse(std::string(key));
    }
    const auto r = c.find("r");
    const auto alpha = c.find("lora_alpha");
    if (r == c.end() || !r->is_number_integer() || r->get<int64_t>() <= 0)
        throw Error(ErrorCode::bad_format, path + ": 'r' must be a positive integer");
    if (alpha == c.end() || !alpha->is_number())
        throw Error(ErrorCode::bad_format, path + ": 'lora_alpha' must be a number");
    if (auto t = c.find("target_modules"); t == c.end() || !(t->is_array() || t->is_string()))
        throw Error(ErrorCode::bad_format, path + ": 'target_modules' must be a list or a string");
    rank = r->get<int64_t>();
    return alpha->get<float>();
}

MatrixRef matrix_of(const safetensors::File& file, const safetensors::TensorInfo& t) {
    if (t.shape.size() != 2) {
        throw Error(ErrorCode::bad_format, "adapter '" + file.path() + "': tensor '" + t.name + "' has " +
                                               std::to_string(t.shape.size()) + " dimensions, not 2");
    }
    MatrixRef m;
    m.name = t.name;
    m.type = t.type;
    m.data = file.tensor_data(t);
    m.rows = t.shape[0];
    m.cols = t.shape[1];
    m.row_bytes = tensor_row_bytes(t.type, m.cols);
    return m;
}

// llama.cpp's LlamaModel.permute applied to the rows of B (B·A's rows are B's): within each head, HF's
// rotate-half row (half j, index i) becomes GGUF's interleaved row 2i + j. Returns `b` pointing at the copy.
MatrixRef permuted_rows(const MatrixRef& b, int64_t n_head, PeftStorage& storage, const std::string& where) {
    if (n_head <= 0 || b.rows % (2 * n_head) != 0) {
        throw Error(ErrorCode::invalid_argument, where + " has " + std::to_string(b.rows) +
                                                     " rows, not a whole number of heads of even size: the "
                                                     "adapter was made for another model");
    }
    std::vector<uint8_t>& out = storage.owned.emplace_back(static_cast<size_t>(b.rows) * b.row_bytes);
    const auto* src = static_cast<const uint8_t*>(b.data);
    const int64_t head_rows = b.rows / n_head;
    const int64_t half = head_rows / 2;
    for (int64_t h = 0; h < n_head; ++h) {
        for (int64_t i = 0; i < half; ++i) {
            for (int64_t j = 0; j < 2; ++j) {
                const int64_t from = h * head_rows + j * half + i;
                const int64_t to = h * head_rows + 2 * i + j;
                std::memcpy(out.data() + to * b.row_bytes, src + from * b.row_bytes, b.row_bytes);
            }
        }
    }
    MatrixRef p = b;
    p.data = out.data();
    return p;
}

}  // namespace

bool is_peft_lora_path(const std::string& path) {
    if (exists(path, true)) return exists(path + "/adapter_config.json", false);
    return path.ends_with(".safetensors") && exists(parent_dir(path) + "/adapter_config.json", false);
}

LoraSource read_peft_lora(const std::string& path, const ModelConfig& config) {
    const bool dir = exists(path, true);
    const std::string config_path = (dir ? path : parent_dir(path)) + "/adapter_config.json";
    const std::string weights_path = dir ? path + "/adapter_model.safetensors" : path;
    if (dir && !exists(weights_path, false)) {
        throw Error(ErrorCode::io, "adapter '" + path + "' has no adapter_model.safetensors" +
                                       (exists(path + "/adapter_model.bin", false)
                                            ? " (only adapter_model.bin, a pickle kvstash does not read: save it "
                                              "with safe_serialization=True)"
                                            : ""));
    }
    auto storage = std::make_shared<PeftStorage>();
    storage->config_text = regular_file::read_all(config_path, "adapter config");
    int64_t rank = 0;
    const float alpha = read_config(storage->config_text, config_path, rank);
    storage->file = safetensors::File::open(weights_path);
    const safetensors::File& file = *storage->file;
    const std::string what = "adapter '" + weights_path + "'";

    HfModelSpec spec;  // what gguf_tensor_name needs to map names as the model converter does
    spec.architecture = config.architecture;
    spec.hf_architecture = config.architecture;
    spec.n_layer = config.n_layer;

    LoraSource source;
    source.path = path;
    source.alpha = alpha;
    std::map<std::string, size_t> index;  // GGUF base name -> pair
    std::vector<std::pair<const safetensors::TensorInfo*, const safetensors::TensorInfo*>> found;
    const std::string prefix = "base_model.model.";
    for (const safetensors::TensorInfo& t : file.tensors()) {
        // The base weight PEFT saves beside a LoRA'd lm_head / embedding is the model's own: skipped, as the
        // converter skips it.
        if (t.name.ends_with(".base_layer.weight")) continue;
        const bool is_a = t.name.ends_with(".lora_A.weight");
        const bool is_b = t.name.ends_with(".lora_B.weight");
        if (!t.name.starts_with(prefix) || (!is_a && !is_b)) {
            throw Error(ErrorCode::unsupported,
                        what + ": tensor '" + t.name +
                            "' is not a base_model.model.<module>.lora_A/lora_B.weight (kvstash does not apply "
                            "lora_embedding_*, modules_to_save or trainable tokens)");
        }
        const std::string module = t.name.substr(prefix.size(), t.name.size() - prefix.size() - 14);
        std::optional<std::string> base;
        try {
            base = gguf_tensor_name(spec, module + ".weight");
        } catch (const Error&) {
            base.reset();
        }
        int64_t layer = -1;
        LoraTarget target = LoraTarget::q;
        if (!base || !parse_lora_target(*base, layer, target)) {
            throw Error(ErrorCode::unsupported, what + ": tensor '" + t.name + "' modifies '" + module +
                                                    "', not a matrix kvstash applies a LoRA to (q/k/v/o_proj, "
                                                    "gate/up/down_proj, lm_head, or their GPT-2 names)");
        }
        auto [it, inserted] = index.emplace(*base, found.size());
        if (inserted) {
            found.emplace_back(nullptr, nullptr);
            LoraSourcePair p;
            p.base_name = *base;
            p.layer = layer;
            p.target = target;
            source.pairs.push_back(std::move(p));
        }
        (is_a ? found[it->second].first : found[it->second].second) = &t;
    }
    for (size_t i = 0; i < found.size(); ++i) {
        LoraSourcePair& p = source.pairs[i];
        if (found[i].first == nullptr || found[i].second == nullptr) {
            throw Error(ErrorCode::bad_format, what + ": the LoRA of '" + p.base_name + "' has a " +
                                                   (found[i].first ? "lora_A but no lora_B" : "lora_B but no lora_A"));
        }
        p.a = matrix_of(file, *found[i].first);
        p.b = matrix_of(file, *found[i].second);
        if (p.a.rows != rank || p.b.cols != rank) {
            throw Error(ErrorCode::bad_format, what + ": the LoRA of '" + p.base_name + "' has rank " +
                                                   std::to_string(p.a.rows) + " / " + std::to_string(p.b.cols) +
                                                   ", but adapter_config.json says r = " + std::to_string(rank));
        }
        if (config.architecture == "llama" && (p.target == LoraTarget::q || p.target == LoraTarget::k)) {
            const int64_t heads = p.target == LoraTarget::q ? config.n_head : config.n_head_kv;
            p.b = permuted_rows(p.b, heads, *storage, what + ": lora_B of '" + p.base_name + "'");
        }
    }
    if (source.pairs.empty()) throw Error(ErrorCode::bad_format, what + " has no LoRA tensors");
    source.content.emplace_back(reinterpret_cast<const uint8_t*>(storage->config_text.data()),
                                storage->config_text.size());
    source.content.emplace_back(file.bytes(), file.size());
    source.storage = std::move(storage);
    return source;
}

}  // namespace kvstash
