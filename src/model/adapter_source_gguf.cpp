// read_gguf_lora: llama.cpp's GGUF LoRA layout (convert_lora_to_gguf.py writes it; llama-adapter.cpp
// reads it). Tensor dims are ggml order: lora_a {n_in, rank}, lora_b {rank, n_out}.
#include <map>

#include "format/gguf.h"
#include "kvstash/error.h"
#include "model/adapter_source.h"

namespace kvstash {
namespace {

MatrixRef matrix_of(const gguf::File& file, const gguf::TensorInfo& t) {
    if (t.dims.size() != 2) {
        throw Error(ErrorCode::bad_format, "adapter '" + file.path() + "': tensor '" + t.name + "' has " +
                                               std::to_string(t.dims.size()) + " dimensions, not 2");
    }
    const TensorTypeTraits& traits = tensor_type_traits(t.type);
    if (t.dims[0] % traits.block_size != 0) {
        throw Error(ErrorCode::unsupported, "adapter '" + file.path() + "': tensor '" + t.name + "' is " +
                                                tensor_type_name(t.raw_type) + " with rows of " +
                                                std::to_string(t.dims[0]) + " elements, not whole blocks");
    }
    MatrixRef m;
    m.name = t.name;
    m.type = t.type;
    m.data = file.tensor_data(t);
    m.cols = t.dims[0];
    m.rows = t.dims[1];
    m.row_bytes = tensor_row_bytes(t.type, m.cols);
    return m;
}

}  // namespace

// "blk.<N>.<part>.weight" or "output.weight" -> (layer, target); false for anything else.
bool parse_lora_target(const std::string& name, int64_t& layer, LoraTarget& target) {
    if (name == "output.weight") {
        layer = -1;
        target = LoraTarget::output;
        return true;
    }
    static const std::map<std::string, LoraTarget> parts = {
        {"attn_q", LoraTarget::q},      {"attn_k", LoraTarget::k},      {"attn_v", LoraTarget::v},
        {"attn_output", LoraTarget::o}, {"ffn_gate", LoraTarget::gate}, {"ffn_up", LoraTarget::up},
        {"ffn_down", LoraTarget::down}};
    const std::string suffix = ".weight";
    if (name.rfind("blk.", 0) != 0 || name.size() <= suffix.size() + 4 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        return false;
    const std::string rest = name.substr(4, name.size() - 4 - suffix.size());  // "<N>.<part>"
    const size_t dot = rest.find('.');
    if (dot == std::string::npos || dot == 0 || dot > 9) return false;
    const std::string index = rest.substr(0, dot);
    if (index.find_first_not_of("0123456789") != std::string::npos) return false;
    const auto part = parts.find(rest.substr(dot + 1));
    if (part == parts.end()) return false;
    layer = std::stoll(index);
    target = part->second;
    return true;
}

LoraSource read_gguf_lora(const gguf::File& file, const std::string& architecture) {
    const std::string what = "adapter '" + file.path() + "'";
    if (file.get_string("general.type").value_or("") != "adapter" ||
        file.get_string("adapter.type").value_or("") != "lora") {
        throw Error(ErrorCode::bad_format,
                    what + " is not a LoRA adapter (general.type must be \"adapter\" and adapter.type \"lora\")");
    }
    const std::string arch = file.get_string("general.architecture").value_or("");
    if (arch != architecture) {
        throw Error(ErrorCode::invalid_argument,
                    what + " was made for architecture '" + arch + "', not this model's '" + architecture + "'");
    }
    LoraSource source;
    source.path = file.path();
    source.alpha = static_cast<float>(file.get_float("adapter.lora.alpha").value_or(0.0));
    // Pair lora_a with lora_b by base name, in the file's order of first appearance.
    std::map<std::string, size_t> index;
    std::vector<std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> found;
    std::vector<std::string> names;
    for (const gguf::TensorInfo& t : file.tensors()) {
        const bool is_a = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".lora_a") == 0;
        const bool is_b = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".lora_b") == 0;
        if (!is_a && !is_b) {
            throw Error(ErrorCode::bad_format, what + ": tensor '" + t.name + "' is neither a .lora_a nor a .lora_b");
        }
        const std::string base = t.name.substr(0, t.name.size() - 7);
        auto [it, inserted] = index.emplace(base, found.size());
        if (inserted) {
            found.emplace_back(nullptr, nullptr);
            names.push_back(base);
        }
        (is_a ? found[it->second].first : found[it->second].second) = &t;
    }
    for (size_t i = 0; i < found.size(); ++i) {
        if (found[i].first == nullptr || found[i].second == nullptr) {
            throw Error(ErrorCode::bad_format, what + ": tensor '" + names[i] + "' has a " +
                                                   (found[i].first ? "lora_a but no lora_b" : "lora_b but no lora_a"));
        }
        LoraSourcePair p;
        p.base_name = names[i];
        if (!parse_lora_target(names[i], p.layer, p.target)) {
            throw Error(ErrorCode::unsupported, what + ": tensor '" + names[i] +
                                                    "' is not a matrix kvstash applies a LoRA to (attn_q, attn_k, "
                                                    "attn_v, attn_output, ffn_gate, ffn_up, ffn_down, output)");
        }
        p.a = matrix_of(file, *found[i].first);
        p.b = matrix_of(file, *found[i].second);
        source.pairs.push_back(std::move(p));
    }
    if (source.pairs.empty()) throw Error(ErrorCode::bad_format, what + " has no LoRA tensors");
    return source;
}

}  // namespace kvstash
