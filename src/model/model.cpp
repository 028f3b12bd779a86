#include <sstream>

#include "kvstash/error.h"
#include "kvstash/model.h"
#include "kvstash/tokenizer.h"
#include "model/model_access.h"
#include "tokenizer/tokenizer_access.h"
#include "tokenizer/vocabulary.h"

namespace kvstash {

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;

std::shared_ptr<const Model> Model::load(const std::string& path) {
    std::shared_ptr<Model> model(new Model());
    Impl& m = *model->impl_;
    m.file = gguf::File::open(path);
    m.config = read_model_config(*m.file);
    m.info = ModelInfo{m.config.architecture, m.config.name,     m.config.n_layer, m.config.n_embd,     m.config.n_head,
                       m.config.n_head_kv,    m.config.head_dim, m.config.n_vocab, m.config.n_ctx_train};
    m.weights = bind_llama_weights(*m.file, m.config);
    m.rope = RopeTable(m.config.rope, m.config.head_dim, m.weights.rope_freqs);
    try {
        m.tokenizer = std::make_unique<Tokenizer>(make_tokenizer(vocabulary_from_gguf(*m.file)));
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
    s << "file:          " << f.path() << " (GGUF v" << f.version() << ", " << f.size() << " bytes, "
      << f.tensors().size() << " tensors)\n";
    s << "name:          " << c.name << "\n";
    s << "architecture:  " << c.architecture << "\n";
    s << "layers:        " << c.n_layer << "\n";
    s << "embedding:     " << c.n_embd << "\n";
    s << "ffn:           " << c.n_ff << "\n";
    s << "heads:         " << c.n_head << " (kv " << c.n_head_kv << ", head dim " << c.head_dim << ")\n";
    s << "vocab:         " << c.n_vocab << "\n";
    s << "context:       " << c.n_ctx_train << "\n";
    s << "rope:          base " << c.rope.freq_base << ", dims " << c.rope.n_rot
      << (c.rope.has_freq_factors ? ", llama3 frequency factors" : "") << "\n";
    s << "rms eps:       " << c.rms_eps << "\n";
    s << "output:        " << (c.tied_output ? "tied to token_embd" : "separate") << "\n";
    s << "weights:       " << impl_->weights.matrix_bytes << " bytes of matrices ("
      << tensor_type_name(static_cast<uint32_t>(impl_->weights.layers.at(0).wq.type)) << " attention, "
      << tensor_type_name(static_cast<uint32_t>(impl_->weights.output.type)) << " output)\n";
    s << "tokenizer:     "
      << (impl_->tokenizer ? f.get_string("tokenizer.ggml.model").value_or("?") + " / " +
                                 f.get_string("tokenizer.ggml.pre").value_or("default")
                           : "unavailable (" + impl_->tokenizer_error + ")")
      << "\n";
    return s.str();
}

}  // namespace kvstash
