#include <algorithm>
#include <cstdio>
#include <sstream>

#include "kvstash/error.h"
#include "kvstash/model.h"
#include "kvstash/tokenizer.h"
#include "model/hf_dir.h"
#include "model/model_access.h"
#include "model/prefill_tiles.h"
#include "tokenizer/tokenizer_access.h"
#include "tokenizer/vocabulary.h"

namespace kvstash {

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;

std::shared_ptr<const Model> Model::load(const std::string& path) { return load(path, ModelLoadOptions{}); }

std::shared_ptr<const Model> Model::load(const std::string& path, const ModelLoadOptions& options) {
    std::shared_ptr<Model> model(new Model());
    Impl& m = *model->impl_;
    if (is_model_directory(path)) {
        m.file = open_hf_directory(path, options.quantize);
    } else if (options.quantize != LoadQuantization::none) {
        throw Error(ErrorCode::invalid_argument,
                    "quantizing at load applies to Hugging Face model directories; '" + path + "' is a GGUF file");
    } else {
        m.file = gguf::File::open(path);
    }
    m.config = read_model_config(*m.file);
    const ModelConfig& c = m.config;
    m.info = ModelInfo{c.architecture, c.name,     c.n_layer, c.n_embd,     c.n_head,
                       c.n_head_kv,    c.head_dim, c.n_vocab, c.n_ctx_train};
    m.info.n_kv_layers = c.n_kv_layers;
    m.info.n_recurrent_layers = c.n_recurrent_layers;
    m.info.recurrent_state_bytes = static_cast<uint64_t>(c.n_recurrent_layers) *
                                   static_cast<uint64_t>(c.ssm.conv_floats() + c.ssm.scan_floats()) * sizeof(float);
    if (options.n_threads < 0) {
        throw Error(ErrorCode::invalid_argument,
                    "the load's thread count must be >= 0 (0 = one per hardware thread), got " +
                        std::to_string(options.n_threads));
    }
    m.weights = bind_weights(*m.file, c);
    repack_for_prefill(m.weights, options);
    if (c.n_kv_layers > 0 && c.use_rope) m.rope = RopeTable(c.rope, c.head_dim, m.weights.rope_freqs);
    if (c.sliding_window > 0 && c.use_rope) m.rope_swa = RopeTable(c.rope_swa, c.head_dim, {});
    try {
        Vocabulary vocabulary = vocabulary_from_gguf(*m.file);
        m.warnings = vocabulary.warnings;
        m.tokenizer = std::make_unique<Tokenizer>(make_tokenizer(std::move(vocabulary)));
    } catch (const Error& e) {
        m.tokenizer_error = e.what();
    }
    return model;
}

const std::string& Model::path() const { return impl_->file->path(); }
const ModelInfo& Model::info() const { return impl_->info; }
int64_t Model::n_vocab() const { return impl_->config.n_vocab; }
int64_t Model::n_ctx_train() const { return impl_->config.n_ctx_train; }
uint64_t Model::weight_bytes() const { return impl_->weights.matrix_bytes; }
const std::vector<std::string>& Model::warnings() const { return impl_->warnings; }

const Tokenizer& Model::tokenizer() const {
    if (!impl_->tokenizer) {
        throw Error(ErrorCode::unsupported,
                    "model '" + path() + "' has no usable tokenizer: " + impl_->tokenizer_error);
    }
    return *impl_->tokenizer;
}

std::string Model::describe() const {
    const ModelConfig& c = impl_->config;
    const gguf::File& f = *impl_->file;
    std::ostringstream s;
    s << "file:          " << f.path()
      << (f.version() == 0 ? " (Hugging Face directory, " : " (GGUF v" + std::to_string(f.version()) + ", ") << f.size()
      << " bytes, " << f.tensors().size() << " tensors)\n";
    s << "name:          " << c.name << "\n";
    s << "architecture:  " << c.architecture << "\n";
    s << "layers:        " << c.n_layer << "\n";
    s << "embedding:     " << c.n_embd << "\n";
    s << "ffn:           " << c.n_ff << "\n";
    if (c.n_kv_layers > 0) {
        s << "heads:         " << c.n_head << " (kv " << c.n_head_kv << ", head dim " << c.head_dim << ")\n";
    }
    if (c.n_recurrent_layers > 0) {
        const SsmConfig& m2 = c.ssm;
        s << "layer kinds:   " << c.n_kv_layers << " attention, " << c.n_recurrent_layers << " "
          << (m2.mamba2 ? "Mamba-2" : "Mamba-1") << "\n";
        s << "ssm:           inner " << m2.d_inner << ", state " << m2.d_state << ", conv " << m2.d_conv << ", heads "
          << m2.n_head << " × " << m2.head_dim << ", groups " << m2.n_group << (m2.mamba2 ? "" : ", dt rank ")
          << (m2.mamba2 ? "" : std::to_string(m2.dt_rank)) << "\n";
        s << "recurrent:     " << impl_->info.recurrent_state_bytes << " bytes of state per sequence\n";
    }
    s << "vocab:         " << c.n_vocab << "\n";
    s << "context:       " << c.n_ctx_train << "\n";
    if (c.n_kv_layers > 0 && c.use_rope) {
        s << "rope:          base " << c.rope.freq_base << ", dims " << c.rope.n_rot
          << (c.rope.has_freq_factors ? ", llama3 frequency factors" : "") << "\n";
        if (c.sliding_window > 0) {
            int64_t n_swa = 0;
            for (int64_t il = 0; il < c.n_layer; ++il) n_swa += c.is_swa(il) ? 1 : 0;
            s << "sliding:       window " << c.sliding_window << " on " << n_swa << " of " << c.n_layer
              << " layers, rope base " << c.rope_swa.freq_base << "\n";
        }
    } else if (c.n_kv_layers > 0 && !c.learned_positions) {
        s << "rope:          none (NoPE)\n";
    }
    s << "norm:          " << (c.norm == NormKind::layer ? "LayerNorm" : "RMSNorm") << ", eps " << c.norm_eps << "\n";
    if (c.learned_positions) s << "positions:     learned, " << c.n_ctx_train << "\n";
    s << "output:        " << (c.tied_output ? "tied to token_embd" : "separate") << "\n";
    const LayerWeights& l0 = impl_->weights.layers.at(0);
    const MatrixRef& first = c.is_recurrent(0) ? l0.ssm_in : l0.wq;
    s << "weights:       " << impl_->weights.matrix_bytes << " bytes of matrices ("
      << tensor_type_name(static_cast<uint32_t>(first.type)) << (c.is_recurrent(0) ? " ssm_in, " : " attention, ")
      << tensor_type_name(static_cast<uint32_t>(impl_->weights.output.type)) << " output)\n";
    const ModelWeights& w = impl_->weights;
    if (w.tile_bytes > 0) {  // backends/cpu/matmul/repack_tiles.h
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%.2f", w.tile_seconds);
        s << "repacked:      " << w.tile_bytes << " bytes in memory beside the file ("
          << (100 * w.tile_bytes + w.matrix_bytes / 2) / std::max<uint64_t>(1, w.matrix_bytes)
          << "% of the matrices' bytes), "
          << (w.output.tiles != nullptr ? "the layers' and the output's" : "the layers'")
          << " matrices for the many-token tiles, made in " << seconds << " s at load (KVSTASH_REPACK=off: none)\n";
    } else if (w.tiles_left_out > 0) {
        s << "repacked:      none: the " << w.tiles_left_out
          << " bytes the prefill tiles would take do not fit beside the mapped weights in 3/4 of the memory "
             "available (prefill unpacks the weights per call instead)\n";
    }
    s << "tokenizer:     "
      << (impl_->tokenizer ? f.get_string("tokenizer.ggml.model").value_or("?") + " / " +
                                 f.get_string("tokenizer.ggml.pre").value_or("default")
                           : "unavailable (" + impl_->tokenizer_error + ")")
      << "\n";
    return s.str();
}

}  // namespace kvstash
