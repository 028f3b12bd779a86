// AdapterSet::load: LoRA GGUF files bound to the model's matrices, control vectors summed per layer,
// and the set's fingerprint. Formats as llama.cpp reads them (src/llama-adapter.cpp, common.cpp's
// control-vector loader): docs/adapters.md.
#include <xxhash.h>

#include <cstring>
#include <optional>

#include "kvstash/error.h"
#include "model/adapter_source.h"
#include "model/adapter_weights.h"
#include "model/model_access.h"

namespace kvstash {
namespace {

// The model matrix a LoRA target names, or null when the model has none of that name.
const MatrixRef* model_matrix(const ModelWeights& w, const ModelConfig& c, int64_t layer, LoraTarget target) {
    if (target == LoraTarget::output) return &w.output;
    if (layer < 0 || layer >= c.n_layer) return nullptr;
    const LayerWeights& l = w.layers[static_cast<size_t>(layer)];
    switch (target) {
        case LoraTarget::q: return &l.wq;
        case LoraTarget::k: return &l.wk;
        case LoraTarget::v: return &l.wv;
        case LoraTarget::o: return &l.wo;
        case LoraTarget::gate: return &l.w_gate;
        case LoraTarget::up: return &l.w_up;
        case LoraTarget::down: return &l.w_down;
        case LoraTarget::output: break;
    }
    return nullptr;
}

std::string target_name(int64_t layer, LoraTarget target) {
    static const char* const parts[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    if (target == LoraTarget::output) return "output.weight";
    return "blk." + std::to_string(layer) + "." + parts[static_cast<size_t>(target)] + ".weight";
}

void hash_file(XXH3_state_t* state, const AdapterFile& f, XXH128_hash_t content) {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, content);
    const auto kind = static_cast<uint32_t>(f.kind);
    uint32_t scale_bits = 0;
    std::memcpy(&scale_bits, &f.scale, sizeof scale_bits);
    XXH3_128bits_update(state, &kind, sizeof kind);
    XXH3_128bits_update(state, canonical.digest, sizeof canonical.digest);
    XXH3_128bits_update(state, &scale_bits, sizeof scale_bits);
}

std::string shape_text(const MatrixRef& m) { return std::to_string(m.rows) + " × " + std::to_string(m.cols); }

// Adds one LoRA source's pairs to the set, checking each against the model matrix it modifies.
void bind_lora(AdapterImpl& set, const ModelImpl& model, const LoraSource& source, float user_scale) {
    for (const LoraSourcePair& p : source.pairs) {
        const std::string where = "adapter '" + source.path + "': tensor '" + p.base_name + "'";
        const MatrixRef* w = model_matrix(model.weights, model.config, p.layer, p.target);
        if (w == nullptr || w->data == nullptr || w->name != target_name(p.layer, p.target)) {
            throw Error(ErrorCode::invalid_argument,
                        where + " modifies a matrix this model does not have: the adapter was made for another model");
        }
        // A: rank × n_in, B: n_out × rank.
        if (p.a.cols != w->cols || p.b.rows != w->rows || p.a.rows != p.b.cols || p.a.rows <= 0) {
            throw Error(ErrorCode::invalid_argument,
                        where + " has lora_a " + shape_text(p.a) + " and lora_b " + shape_text(p.b) +
                            " (rows × cols), but the model's matrix is " + shape_text(*w) +
                            ", so lora_a must be rank × " + std::to_string(w->cols) + " and lora_b " +
                            std::to_string(w->rows) + " × rank: the adapter was made for another model");
        }
        const auto rank = static_cast<float>(p.a.rows);
        const float scale = source.alpha != 0.0f ? user_scale * source.alpha / rank : user_scale;
        const size_t layer =
            p.target == LoraTarget::output ? static_cast<size_t>(model.config.n_layer) : static_cast<size_t>(p.layer);
        set.lora[layer][static_cast<size_t>(p.target)].push_back(LoraPair{p.a, p.b, scale});
        set.has_lora = true;
    }
}

// Adds scale · direction.<layer> of one control-vector file to the set's per-layer sums.
void add_control_vector(AdapterImpl& set, const ModelConfig& c, const gguf::File& file, const AdapterFile& f) {
    bool any = false;
    for (const gguf::TensorInfo& t : file.tensors()) {
        const std::string where = "control vector '" + f.path + "': tensor '" + t.name + "'";
        if (t.name.rfind("direction.", 0) != 0) continue;
        const std::string index = t.name.substr(std::strlen("direction."));
        int64_t layer = -1;
        if (!index.empty() && index.size() < 10 && index.find_first_not_of("0123456789") == std::string::npos)
            layer = std::stoll(index);
        if (layer <= 0) throw Error(ErrorCode::bad_format, where + " names no layer >= 1 (layer 0 has none)");
        if (t.type != TensorType::F32 || t.dims.size() != 1)
            throw Error(ErrorCode::bad_format, where + " must be a one-dimensional F32 tensor");
        if (t.dims[0] != c.n_embd || layer >= c.n_layer) {
            throw Error(ErrorCode::invalid_argument,
                        where + " is " + std::to_string(t.dims[0]) + " floats for layer " + std::to_string(layer) +
                            ", but the model has n_embd " + std::to_string(c.n_embd) + " and layers 1.." +
                            std::to_string(c.n_layer - 1) + ": the vector was made for another model");
        }
        std::vector<float>& sum = set.control[static_cast<size_t>(layer)];
        if (sum.empty()) sum.assign(static_cast<size_t>(c.n_embd), 0.0f);
        const auto* src = reinterpret_cast<const float*>(file.tensor_data(t));
        for (int64_t j = 0; j < c.n_embd; ++j) {
            float v = 0.0f;
            std::memcpy(&v, src + j, sizeof v);  // the data offset is aligned, but do not rely on it
            sum[static_cast<size_t>(j)] += v * f.scale;
        }
        any = true;
    }
    if (!any) throw Error(ErrorCode::bad_format, "control vector '" + f.path + "' has no direction.<layer> tensors");
}

}  // namespace

AdapterSet::AdapterSet() : impl_(std::make_unique<Impl>()) {}
AdapterSet::~AdapterSet() = default;

std::shared_ptr<const AdapterSet> AdapterSet::load(const Model& model, std::span<const AdapterFile> files,
                                                   ControlVectorLayers layers) {
    const ModelImpl& m = ModelAccess::impl(model);
    const ModelConfig& c = m.config;
    std::shared_ptr<AdapterSet> set(new AdapterSet());
    Impl& s = *set->impl_;
    s.model = &model;
    s.files.assign(files.begin(), files.end());
    s.lora.resize(static_cast<size_t>(c.n_layer) + 1);
    s.control.resize(static_cast<size_t>(c.n_layer));
    XXH3_state_t* state = XXH3_createState();
    if (state == nullptr) throw std::bad_alloc();
    XXH3_128bits_reset(state);
    static const char kDomain[] = "kvstash.adapters.v1";
    XXH3_128bits_update(state, kDomain, sizeof kDomain);
    try {
        bool any_control = false;
        for (const AdapterFile& f : files) {
            if (f.kind == AdapterKind::lora && is_peft_lora_path(f.path)) {
                LoraSource source = read_peft_lora(f.path, c);
                XXH3_state_t* content = XXH3_createState();
                if (content == nullptr) throw std::bad_alloc();
                XXH3_128bits_reset(content);
                for (std::span<const uint8_t> part : source.content)
                    XXH3_128bits_update(content, part.data(), part.size());
                const XXH128_hash_t digest = XXH3_128bits_digest(content);
                XXH3_freeState(content);
                hash_file(state, f, digest);
                bind_lora(s, m, source, f.scale);
                s.sources.push_back(std::move(source.storage));  // the pairs point into it
                continue;
            }
            std::unique_ptr<gguf::File> file = gguf::File::open(f.path);
            hash_file(state, f, XXH3_128bits(file->bytes(), file->size()));
            if (f.kind == AdapterKind::lora) {
                const LoraSource source = read_gguf_lora(*file, c.architecture);
                bind_lora(s, m, source, f.scale);
                s.mapped.push_back(std::move(file));  // the pairs point into it
            } else {
                add_control_vector(s, c, *file, f);
                any_control = true;
            }
        }
        if (any_control) {
            const int64_t first = layers.first <= 0 ? 1 : layers.first;
            const int64_t last = layers.last <= 0 ? c.n_layer : layers.last;
            for (int64_t il = 0; il < c.n_layer; ++il) {
                if (il < first || il > last) s.control[static_cast<size_t>(il)].clear();
            }
            const int64_t range[2] = {first, last};
            XXH3_128bits_update(state, range, sizeof range);
        }
    } catch (...) {
        XXH3_freeState(state);
        throw;
    }
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(state));
    XXH3_freeState(state);
    std::memcpy(s.fingerprint.data(), canonical.digest, s.fingerprint.size());
    return set;
}

bool AdapterSet::empty() const { return impl_->files.empty(); }
const std::vector<AdapterFile>& AdapterSet::files() const { return impl_->files; }
const Model& AdapterSet::model() const { return *impl_->model; }

std::string AdapterSet::fingerprint() const {
    if (empty()) return {};
    static const char digits[] = "0123456789abcdef";
    std::string hex;
    for (uint8_t b : impl_->fingerprint) {
        hex += digits[b >> 4];
        hex += digits[b & 15];
    }
    return hex;
}

std::string AdapterSet::describe() const {
    if (empty()) return "no adapters";
    std::string text;
    for (const AdapterFile& f : impl_->files) {
        if (!text.empty()) text += ", ";
        char scale[32];
        std::snprintf(scale, sizeof scale, "%g", static_cast<double>(f.scale));
        text += (f.kind == AdapterKind::lora ? "lora " : "control-vector ") + f.path + " ×" + scale;
    }
    return text;
}

}  // namespace kvstash
