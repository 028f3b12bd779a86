// kvstash.Session: a multi-turn chat whose system prompt is computed once, undoable, saved to one file.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "kvstash/chat.h"
#include "kvstash/session.h"
#include "kvstash/speculative.h"
#include "py_types.h"

namespace kvstash::python {

namespace {

// The Session holds a reference to its Evaluator, so it owns one for its lifetime (not leased).
class PySession {
public:
    PySession(nb::object model_ref, PyModel& model, std::optional<std::string> template_name)
        : model_ref_(std::move(model_ref)),
          model_(&model),
          evaluator_(std::make_unique<Evaluator>(model.shared(), model.threads())),
          template_(template_name ? ChatTemplate::named(*template_name) : ChatTemplate::for_model(model.model())) {}

    void start(const std::string& system_prompt, StateOptions state_options, bool use_cache) {
        SessionOptions options{.state = state_options, .cache = use_cache ? model_->cache() : nullptr};
        nb::gil_scoped_release release;
        session_.emplace(*evaluator_, template_, system_prompt, options);
    }
    void open(const std::string& path, bool use_cache, std::shared_ptr<const AdapterSet> adapters) {
        SessionOptions options{.state = {}, .cache = use_cache ? model_->cache() : nullptr};
        options.state.adapters = std::move(adapters);
        nb::gil_scoped_release release;
        session_.emplace(Session::open(*evaluator_, template_, path, options));
    }

    Completion reply(const std::string& message, int64_t max_tokens, const SamplingArgs& args,
                     std::vector<std::string> stop, nb::object callback, const std::optional<std::string>& speculative,
                     const PyModel* draft_model, int32_t spec_max) {
        Busy busy(*this);
        GenerateOptions options;
        options.max_tokens = max_tokens;
        options.stop_strings = std::move(stop);
        set_drafter(speculative, draft_model, spec_max, options);
        PyTokenCallback on_text(std::move(callback));
        TokenCallback cb = on_text.as_callback();
        std::optional<GenerateResult> result;
        {
            nb::gil_scoped_release release;
            const SamplerState* previous = session_->state().sampler_state();
            Sampler sampler = make_sampler(args, previous);
            result.emplace(session_->reply(message, sampler, options, cb));
        }
        on_text.rethrow_if_failed();
        return Completion{std::move(result->text), std::move(result->tokens),           stop_reason_name(result->stop),
                          result->seconds,         session_->last_turn().prompt_tokens, result->drafted,
                          result->accepted};
    }

    Session& session() { return *session_; }
    const nb::object& model_ref() const { return model_ref_; }
    PyModel& model() const { return *model_; }

    class Busy {
    public:
        explicit Busy(PySession& s) : s_(s) {
            if (s_.busy_.exchange(true)) {
                throw Error(ErrorCode::invalid_argument, "this Session is in use by another thread");
            }
        }
        Busy(const Busy&) = delete;
        ~Busy() { s_.busy_.store(false); }

    private:
        PySession& s_;
    };

private:
    // As Model.complete's speculative= keywords. A draft model's drafter is kept from one reply to the next
    // with the same draft model: its State follows the conversation (cut back to the common prefix each
    // round), so a turn evaluates only the new tokens on the draft model too.
    void set_drafter(const std::optional<std::string>& speculative, const PyModel* draft_model, int32_t spec_max,
                     GenerateOptions& options) {
        const bool same_draft_model = speculative && *speculative == "draft" && draft_model != nullptr &&
                                      model_drafter_ && draft_model->shared() == model_drafter_model_;
        if (same_draft_model) {
            options.drafter = model_drafter_;
            options.speculation.max_draft = spec_max;
            return;
        }
        set_speculation(*model_, speculative, draft_model, spec_max, options);
        if (speculative && *speculative == "draft") {
            model_drafter_ = options.drafter;
            model_drafter_model_ = draft_model->shared();
        }
    }

    nb::object model_ref_;
    PyModel* model_;
    std::unique_ptr<Evaluator> evaluator_;
    ChatTemplate template_;
    std::optional<Session> session_;  // declared after the evaluator it refers to
    std::atomic<bool> busy_{false};
    std::shared_ptr<Drafter> model_drafter_;            // the last speculative="draft" reply's drafter ...
    std::shared_ptr<const Model> model_drafter_model_;  // ... and its draft model
};

KvType state_kv_type(const std::string& name) {
    std::optional<KvType> type = parse_kv_type(name);
    if (!type) {
        throw Error(ErrorCode::invalid_argument, "kv_type must be \"f16\", \"f32\" or \"q8_0\", not \"" + name + "\"");
    }
    return *type;
}

}  // namespace

void bind_session(nb::module_& m) {
    nb::class_<PySession>(m, "Session",
                          "A multi-turn chat: the system prompt is evaluated once, each turn evaluates only its "
                          "new tokens; undo() drops the last exchange without recomputation. With the model's "
                          "prefix cache, sessions sharing a system prompt compute it once (across processes "
                          "with cache_dir).")
        .def(
            "__init__",
            [](PySession* self, nb::object model, const std::string& system_prompt, std::optional<std::string> tmpl,
               int64_t n_ctx, const std::string& kv_type, bool use_cache, nb::object adapters) {
                PyModel& pm = nb::cast<PyModel&>(model);
                StateOptions state_options{.kv_type = state_kv_type(kv_type), .n_ctx = n_ctx};
                state_options.adapters = adapter_set_arg(pm, adapters);
                new (self) PySession(model, pm, tmpl);
                self->start(system_prompt, state_options, use_cache);
            },
            nb::arg("model"), nb::arg("system_prompt") = "", nb::arg("template") = nb::none(), nb::arg("n_ctx") = 0,
            nb::arg("kv_type") = "f16", nb::arg("use_cache") = true, nb::arg("adapters") = nb::none(),
            "A chat with `model`. template: a name (\"chatml\", \"llama3\", \"gemma\", ...) or None for the "
            "model's own; use_cache: take/offer the system prompt from/to the model's prefix cache.")
        .def_static(
            "open",
            [](nb::object model, const std::string& path, std::optional<std::string> tmpl, bool use_cache,
               nb::object adapters) {
                PyModel& pm = nb::cast<PyModel&>(model);
                std::shared_ptr<const AdapterSet> set = adapter_set_arg(pm, adapters);
                check_state_file_model(pm, path, set.get());
                auto* s = new PySession(model, pm, tmpl);
                try {
                    s->open(path, use_cache, std::move(set));
                } catch (...) {
                    delete s;
                    throw;
                }
                return s;
            },
            nb::arg("model"), nb::arg("path"), nb::arg("template") = nb::none(), nb::arg("use_cache") = true,
            nb::arg("adapters") = nb::none(),
            "A session saved by Session.save, resumed (bit-exactly), under the adapters it was saved with.")
        .def(
            "set_adapters",
            [](PySession& self, nb::object adapters) {
                PySession::Busy busy(self);
                std::shared_ptr<const AdapterSet> set = adapter_set_arg(self.model(), adapters);
                // The model's prefix cache holds States of any adapter set (its keys include the set).
                PrefixCache* cache = self.model().cache();
                nb::gil_scoped_release release;
                self.session().set_adapters(std::move(set), cache);
            },
            nb::arg("adapters").none(),
            "Continues the conversation under other adapters (None: the model alone): its tokens are computed "
            "again under them, bitwise as a cold evaluation would.")
        .def_prop_ro(
            "adapters", [](PySession& self) { return adapters_description(self.session().state().adapters()); },
            "What the session's State is computed under (\"no adapters\" when none).")
        .def(
            "_reply",
            [](PySession& self, const std::string& message, int64_t max_tokens, float temperature, float top_p,
               int32_t top_k, float min_p, std::optional<uint64_t> seed, std::vector<std::string> stop,
               float repeat_penalty, nb::object callback, std::optional<std::string> speculative,
               const PyModel* draft_model, int32_t spec_max) {
                SamplingArgs args;
                args.temperature = temperature;
                args.top_p = top_p;
                args.top_k = top_k;
                args.min_p = min_p;
                args.repeat_penalty = repeat_penalty;
                args.seed = seed;
                return self.reply(message, max_tokens, args, std::move(stop), std::move(callback), speculative,
                                  draft_model, spec_max);
            },
            nb::arg("message"), nb::arg("max_tokens") = 256, nb::kw_only(), nb::arg("temperature") = 0.8f,
            nb::arg("top_p") = 0.95f, nb::arg("top_k") = 40, nb::arg("min_p") = 0.05f, nb::arg("seed") = nb::none(),
            nb::arg("stop") = std::vector<std::string>{}, nb::arg("repeat_penalty") = 1.0f,
            nb::arg("callback") = nb::none(), nb::arg("speculative") = nb::none(), nb::arg("draft_model") = nb::none(),
            nb::arg("spec_max") = 16,
            "Adds the user's message and generates the reply; a Completion. speculative=\"lookup\" or \"draft\" "
            "(with draft_model) decodes speculatively, as Model.complete: the reply is bitwise the same.")
        .def(
            "undo",
            [](PySession& self) {
                PySession::Busy busy(self);
                return self.session().undo();
            },
            "Drops the last user + assistant exchange (no recomputation); False when there is none.")
        .def(
            "reset",
            [](PySession& self) {
                PySession::Busy busy(self);
                self.session().reset();
            },
            "Back to the system prompt alone.")
        .def(
            "save",
            [](PySession& self, const std::string& path, bool compress) {
                PySession::Busy busy(self);
                nb::gil_scoped_release release;
                self.session().save(path, SaveOptions{.file_kv_type = std::nullopt, .compress = compress});
            },
            nb::arg("path"), nb::arg("compress") = false,
            "One state file: the State and the messages (also a plain state file for State.load).")
        .def(
            "load",
            [](PySession& self, const std::string& path) {
                PySession::Busy busy(self);
                check_state_file_model(self.model(), path, self.session().state().adapters().get());
                nb::gil_scoped_release release;
                self.session().load(path);
            },
            nb::arg("path"), "Replaces this session with the one saved in `path` (unchanged on error).")
        .def_prop_ro(
            "messages",
            [](PySession& self) {
                nb::list out;
                for (const ChatMessage& msg : self.session().messages()) {
                    out.append(nb::make_tuple(text_from_bytes(msg.role), text_from_bytes(msg.content)));
                }
                return out;
            },
            "[(role, content), ...] of the conversation (invalid UTF-8 in a reply replaced by U+FFFD).")
        .def_prop_ro(
            "state",
            [](PySession& self) { return new PyState(self.model_ref(), self.model(), self.session().state().fork()); },
            "A fork of the session's State (O(1)).")
        .def_prop_ro("system_tokens", [](PySession& self) { return self.session().system_tokens(); })
        .def_prop_ro("template", [](PySession& self) { return self.session().chat_template().name(); })
        .def_prop_ro(
            "last_turn",
            [](PySession& self) {
                const SessionTurnStats& t = self.session().last_turn();
                nb::dict d;
                d["prompt_tokens"] = t.prompt_tokens;
                d["computed"] = t.computed;
                d["reused"] = t.reused;
                d["appended"] = t.appended;
                return d;
            },
            "What the last reply did with the prompt: tokens computed vs reused.");
}

}  // namespace kvstash::python
