// kvstash.Model: loading, tokenizer, chat template, evaluation, the prefix cache.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <span>

#include "kvstash/chat.h"
#include "kvstash/state_file.h"
#include "kvstash/tokenizer.h"
#include "py_types.h"

namespace kvstash::python {

PyModel::PyModel(const std::string& path, int threads, std::optional<uint64_t> cache_ram,
                 std::optional<std::string> cache_dir, uint64_t cache_disk)
    : threads_(threads) {
    if (threads < 0) throw Error(ErrorCode::invalid_argument, "threads must be >= 0 (0 = all hardware threads)");
    {
        nb::gil_scoped_release release;
        model_ = Model::load(path, ModelLoadOptions{.n_threads = threads});
    }
    if (cache_ram || cache_dir) {
        PrefixCacheOptions options;
        if (cache_ram) options.ram_budget_bytes = *cache_ram;
        if (cache_dir) options.disk_dir = *cache_dir;
        options.disk_budget_bytes = cache_disk;
        cache_ = std::make_unique<PrefixCache>(*model_, options);
    }
}

PyModel::~PyModel() = default;

PyModel::Lease PyModel::lease() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!idle_.empty()) {
            std::unique_ptr<Evaluator> evaluator = std::move(idle_.back());
            idle_.pop_back();
            return Lease(*this, std::move(evaluator));
        }
    }
    return Lease(*this, std::make_unique<Evaluator>(model_, threads_));
}

void PyModel::give_back(std::unique_ptr<Evaluator> evaluator) {
    if (!evaluator) return;
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(std::move(evaluator));
}

std::vector<int32_t> prompt_tokens(const Model& model, const nb::handle& prompt, bool at_start) {
    if (prompt.is_none()) return {};
    if (nb::isinstance<nb::str>(prompt)) {
        return model.tokenizer().encode(nb::cast<std::string>(prompt), at_start ? AddSpecial::yes : AddSpecial::no,
                                        ParseSpecial::yes);
    }
    if (nb::isinstance<nb::bytes>(prompt)) {
        throw nb::type_error("prompt must be a str or a sequence of token ids, not bytes");
    }
    return nb::cast<std::vector<int32_t>>(prompt);
}

namespace {

nb::dict model_info(const PyModel& m) {
    const ModelInfo& info = m.model().info();
    nb::dict d;
    d["architecture"] = info.architecture;
    d["name"] = info.name;
    d["n_layer"] = info.n_layer;
    d["n_embd"] = info.n_embd;
    d["n_head"] = info.n_head;
    d["n_head_kv"] = info.n_head_kv;
    d["head_dim"] = info.head_dim;
    d["n_vocab"] = info.n_vocab;
    d["n_ctx_train"] = info.n_ctx_train;
    d["n_kv_layers"] = info.n_kv_layers;
    d["n_recurrent_layers"] = info.n_recurrent_layers;
    return d;
}

nb::dict cache_stats(const PyModel& m) {
    nb::dict d;
    if (!m.cache()) return d;
    const PrefixCacheStats s = m.cache()->stats();
    d["lookups"] = s.lookups;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["tokens_reused"] = s.tokens_reused;
    d["tokens_computed"] = s.tokens_computed;
    d["blocks_held"] = s.blocks_held;
    d["bytes_held"] = s.bytes_held;
    d["ram_budget_bytes"] = s.ram_budget_bytes;
    d["disk_hits"] = s.disk_hits;
    d["disk_blocks_written"] = s.disk_blocks_written;
    d["disk_bytes_held"] = s.disk_bytes_held;
    return d;
}

std::string apply_chat_template(const PyModel& m, const std::vector<std::pair<std::string, std::string>>& messages,
                                bool add_generation_prompt, std::optional<std::string> name) {
    ChatTemplate tmpl = name ? ChatTemplate::named(*name) : ChatTemplate::for_model(m.model());
    std::vector<ChatMessage> chat;
    for (const auto& [role, content] : messages) chat.push_back(ChatMessage{role, content});
    return tmpl.render(chat, add_generation_prompt ? AddGenerationPrompt::yes : AddGenerationPrompt::no);
}

// Evaluates `tokens` into `state` (GIL released). With all_logits: [N, n_vocab] float32 of every new position.
nb::object eval(PyModel& m, PyState& s, const std::vector<int32_t>& tokens, bool all_logits) {
    PyState::Busy busy(s);
    State& state = s.mutate();
    auto rows = std::make_unique<std::vector<float>>();
    {
        nb::gil_scoped_release release;
        PyModel::Lease evaluator = m.lease();
        (*evaluator).eval(state, tokens, all_logits ? rows.get() : nullptr);
    }
    if (!all_logits) return nb::none();
    const size_t n_vocab = static_cast<size_t>(m.model().n_vocab());
    std::vector<float>* data = rows.release();
    nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
    return nb::cast(nb::ndarray<nb::numpy, float, nb::ndim<2>>(data->data(), {data->size() / n_vocab, n_vocab}, owner));
}

// A new State holding `prompt` evaluated; with the prefix cache, its longest cached prefix is reused
// and the result offered back to the cache.
PyState* prefill(nb::object self, const nb::handle& prompt, int64_t n_ctx, const std::string& kv_type,
                 nb::object adapters) {
    PyModel& m = nb::cast<PyModel&>(self);
    std::vector<int32_t> tokens = prompt_tokens(m.model(), prompt, true);
    if (tokens.empty()) throw Error(ErrorCode::invalid_argument, "prefill: the prompt has no tokens");
    std::optional<KvType> type = parse_kv_type(kv_type);
    if (!type)
        throw Error(ErrorCode::invalid_argument,
                    "kv_type must be \"f16\", \"f32\" or \"q8_0\", not \"" + kv_type + "\"");
    StateOptions options{.kv_type = *type, .n_ctx = n_ctx};
    options.adapters = adapter_set_arg(m, adapters);
    std::optional<State> result;
    {
        nb::gil_scoped_release release;
        PyModel::Lease evaluator = m.lease();
        if (m.cache()) {
            CachedPrefix hit = m.cache()->acquire(tokens, options);
            (*evaluator).eval(hit.state, std::span<const int32_t>(tokens).subspan(hit.reused_tokens));
            m.cache()->release(hit.state);
            result.emplace(std::move(hit.state));
        } else {
            result.emplace(m.model(), options);
            (*evaluator).eval(*result, tokens);
        }
    }
    return new PyState(self, m, std::move(*result));
}

}  // namespace

ModelClass bind_model(nb::module_& m) {
    ModelClass model_class(m, "Model",
                           "A GGUF model, loaded (memory-mapped) once and shared: by any number of States and by "
                           "several threads at once (each call leases its own evaluator).");
    model_class
        .def(nb::init<const std::string&, int, std::optional<uint64_t>, std::optional<std::string>, uint64_t>(),
             nb::arg("path"), nb::arg("threads") = 0, nb::arg("cache_ram") = nb::none(),
             nb::arg("cache_dir") = nb::none(), nb::arg("cache_disk") = uint64_t{4} << 30,
             "Loads a GGUF model. threads: compute threads per call (0 = all hardware threads). cache_ram "
             "(bytes) and/or cache_dir (a directory, shared across processes) turn the prefix cache on: "
             "prefill() and Session then reuse the KV of prompts already computed.")
        .def_prop_ro("path", [](const PyModel& self) { return self.model().path(); })
        .def_prop_ro("threads", &PyModel::threads)
        .def_prop_ro("info", &model_info, "The model's shape: architecture, n_layer, n_head_kv, head_dim, ...")
        .def_prop_ro("n_vocab", [](const PyModel& self) { return self.model().n_vocab(); })
        .def_prop_ro("n_ctx_train", [](const PyModel& self) { return self.model().n_ctx_train(); })
        .def_prop_ro(
            "fingerprint", [](const PyModel& self) { return model_fingerprint(self.model()); },
            "The weights + tokenizer fingerprint state files are bound to (hex).")
        .def("describe", [](const PyModel& self) { return self.model().describe(); })
        .def(
            "tokenize",
            [](const PyModel& self, const std::string& text, bool add_special, bool parse_special) {
                return self.model().tokenizer().encode(text, add_special ? AddSpecial::yes : AddSpecial::no,
                                                       parse_special ? ParseSpecial::yes : ParseSpecial::no);
            },
            nb::arg("text"), nb::arg("add_special") = true, nb::arg("parse_special") = true,
            "Token ids of `text`; add_special: BOS as the vocabulary asks; parse_special: control-token text "
            "(<|im_start|>) becomes the control token.")
        .def(
            "detokenize_bytes",
            [](const PyModel& self, const std::vector<int32_t>& ids) {
                std::string bytes = self.model().tokenizer().decode(ids);
                return nb::bytes(bytes.data(), bytes.size());
            },
            nb::arg("tokens"), "The exact bytes of `tokens` (may end inside a UTF-8 character).")
        .def(
            "detokenize",
            [](const PyModel& self, const std::vector<int32_t>& ids) {
                return text_from_bytes(self.model().tokenizer().decode(ids));
            },
            nb::arg("tokens"), "The text of `tokens` (invalid UTF-8 replaced by U+FFFD).")
        .def(
            "token_piece",
            [](const PyModel& self, int32_t id) {
                std::string bytes = self.model().tokenizer().token_piece(id);
                return nb::bytes(bytes.data(), bytes.size());
            },
            nb::arg("token"), "The bytes of one token.")
        .def_prop_ro("bos", [](const PyModel& self) { return self.model().tokenizer().bos(); })
        .def_prop_ro("eos", [](const PyModel& self) { return self.model().tokenizer().eos(); })
        .def(
            "is_eog", [](const PyModel& self, int32_t id) { return self.model().tokenizer().is_eog(id); },
            nb::arg("token"), "True for tokens that end generation (EOS, <|im_end|>, ...).")
        .def("apply_chat_template", &apply_chat_template, nb::arg("messages"), nb::arg("add_generation_prompt") = true,
             nb::arg("template") = nb::none(),
             "Renders [(role, content), ...] with the model's chat template (or the one named), byte-identical "
             "to transformers' apply_chat_template.")
        .def("eval", &eval, nb::arg("state"), nb::arg("tokens"), nb::arg("all_logits") = false,
             "Appends `tokens` to `state` and computes their logits (GIL released). Returns None, or with "
             "all_logits=True a [len(tokens), n_vocab] float32 array. Raises ContextOverflow past the "
             "state's context; the state is unchanged when it raises.")
        .def("prefill", &prefill, nb::arg("prompt"), nb::arg("n_ctx") = 0, nb::arg("kv_type") = "f16", nb::kw_only(),
             nb::arg("adapters") = nb::none(),
             "A new State holding `prompt` (str: tokenized with BOS; or token ids) evaluated, under "
             "`adapters` (a kvstash.Adapters) if given. With the prefix cache on, the longest cached prefix "
             "(of the same adapters) is reused and the result offered back.")
        .def_prop_ro("has_cache", [](const PyModel& self) { return self.cache() != nullptr; })
        .def("cache_stats", &cache_stats, "The prefix cache's counters ({} without a cache).")
        .def(
            "cache_release",
            [](PyModel& self, const PyState& state) {
                if (self.cache()) self.cache()->release(state.get());
            },
            nb::arg("state"), "Offers the state's full 32-token blocks to the prefix cache (no-op without one).");
    return model_class;
}

}  // namespace kvstash::python
