// Model.complete: prompt + the generation loop, with the GIL released and a Python per-token callback.
// (kvstash/__init__.py builds generate() and streaming on it.)
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "kvstash/error.h"
#include "kvstash/speculative.h"
#include "py_types.h"

namespace kvstash::python {

Sampler make_sampler(const SamplingArgs& args, const SamplerState* previous) {
    SamplerParams params;
    params.temperature = args.temperature;
    params.top_k = args.top_k;
    params.top_p = args.top_p;
    params.min_p = args.min_p;
    params.repeat_penalty = args.repeat_penalty;
    params.repeat_last_n = args.repeat_last_n;
    params.presence_penalty = args.presence_penalty;
    params.frequency_penalty = args.frequency_penalty;
    params.logit_bias = args.logit_bias;
    if (!args.seed && previous) {
        SamplerState resumed = *previous;  // same random sequence, new filters
        resumed.params = params;
        resumed.params.seed = previous->params.seed;
        return Sampler(resumed);
    }
    params.seed = args.seed.value_or(0);
    return Sampler(params);
}

nb::str text_from_bytes(std::string_view bytes) {
    return nb::steal<nb::str>(PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace"));
}

TokenCallback PyTokenCallback::as_callback() {
    if (!callable_.is_valid() || callable_.is_none()) return {};
    return [this](int32_t token, std::string_view text) -> bool {
        if (failure_) return false;
        nb::gil_scoped_acquire acquire;
        try {
            nb::object keep_going = callable_(token, text_from_bytes(text));
            return keep_going.is_none() || nb::cast<bool>(keep_going);
        } catch (...) {
            failure_ = std::current_exception();
            return false;
        }
    };
}

void PyTokenCallback::rethrow_if_failed() {
    if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void set_speculation(const PyModel& m, const std::optional<std::string>& speculative, const PyModel* draft_model,
                     int32_t spec_max, GenerateOptions& options) {
    if (!speculative) {
        if (draft_model) throw Error(ErrorCode::invalid_argument, "draft_model needs speculative=\"draft\"");
        return;
    }
    options.speculation.max_draft = spec_max;
    if (*speculative == "lookup") {
        options.drafter = make_lookup_drafter();
    } else if (*speculative == "draft") {
        if (!draft_model)
            throw Error(ErrorCode::invalid_argument, "speculative=\"draft\" needs draft_model=Model(...)");
        options.drafter = make_model_drafter(draft_model->shared(), m.model(), {.n_threads = draft_model->threads()});
    } else {
        throw Error(ErrorCode::invalid_argument,
                    "speculative must be None, \"lookup\" or \"draft\", got \"" + *speculative + "\"");
    }
}

namespace {

Completion to_completion(GenerateResult result, int64_t prompt_tokens) {
    return Completion{
        std::move(result.text), std::move(result.tokens), stop_reason_name(result.stop), result.seconds, prompt_tokens,
        result.drafted,         result.accepted};
}

Completion complete(PyModel& m, PyState& s, const nb::handle& prompt, int64_t max_tokens, float temperature,
                    float top_p, int32_t top_k, float min_p, std::optional<uint64_t> seed,
                    std::vector<std::string> stop, float repeat_penalty, int32_t repeat_last_n, float presence_penalty,
                    float frequency_penalty, std::vector<std::pair<int32_t, float>> logit_bias, nb::object callback,
                    bool stop_at_eog, std::optional<std::string> speculative, const PyModel* draft_model,
                    int32_t spec_max) {
    PyState::Busy busy(s);
    std::vector<int32_t> tokens = prompt_tokens(m.model(), prompt, s.get().n_tokens() == 0);
    SamplingArgs args{temperature,
                      top_p,
                      top_k,
                      min_p,
                      repeat_penalty,
                      repeat_last_n,
                      presence_penalty,
                      frequency_penalty,
                      std::move(seed),
                      std::move(logit_bias)};
    GenerateOptions options;
    options.max_tokens = max_tokens;
    options.stop_strings = std::move(stop);
    options.stop_at_end_of_generation = stop_at_eog;
    set_speculation(m, speculative, draft_model, spec_max, options);
    PyTokenCallback on_text(std::move(callback));
    TokenCallback cb = on_text.as_callback();
    State& state = s.mutate();
    std::optional<GenerateResult> result;
    {
        nb::gil_scoped_release release;
        PyModel::Lease evaluator = m.lease();
        if (tokens.empty() && state.n_tokens() > 0 && state.last_logits().empty()) {
            // After truncate() the last position's logits are gone: evaluate its token again.
            tokens.push_back(state.tokens().back());
            state.truncate(state.n_tokens() - 1);
        }
        if (!tokens.empty()) (*evaluator).eval(state, tokens);
        Sampler sampler = make_sampler(args, state.sampler_state());
        try {
            result.emplace(generate(*evaluator, state, sampler, options, cb));
        } catch (...) {
            nb::gil_scoped_acquire acquire;
            on_text.rethrow_if_failed();
            throw;
        }
    }
    on_text.rethrow_if_failed();
    return to_completion(std::move(*result), state.n_tokens() - static_cast<int64_t>(result->tokens.size()));
}

}  // namespace

void bind_completion(nb::module_& m) {
    nb::class_<Completion>(m, "Completion", "What one generation produced.")
        .def_prop_ro(
            "text", [](const Completion& c) { return text_from_bytes(c.text); },
            "The generated text (without an end-of-generation token or stop string); bytes that are not valid "
            "UTF-8 (a character cut by max_tokens) become U+FFFD.")
        .def_ro("tokens", &Completion::tokens, "The generated token ids (an end-of-generation token included).")
        .def_ro("stop_reason", &Completion::stop_reason,
                "\"end_of_generation\", \"stop_string\", \"max_tokens\", \"callback\" or \"context_full\".")
        .def_ro("seconds", &Completion::seconds, "Wall time of the generation loop.")
        .def_ro("prompt_tokens", &Completion::prompt_tokens, "Tokens in the State before the first generated one.")
        .def_ro("drafted", &Completion::drafted, "Speculative decoding: draft tokens verified (0 without).")
        .def_ro("accepted", &Completion::accepted, "Speculative decoding: draft tokens kept.")
        .def("__str__", [](const Completion& c) { return text_from_bytes(c.text); })
        .def("__repr__", [](const Completion& c) {
            return "<kvstash.Completion tokens=" + std::to_string(c.tokens.size()) + " stop_reason=" + c.stop_reason +
                   ">";
        });
}

void bind_generate(nb::module_& m, ModelClass& model_class) {
    bind_completion(m);
    model_class.def(
        "complete", &complete, nb::arg("state"), nb::arg("prompt") = nb::none(), nb::arg("max_tokens") = 256,
        nb::kw_only(), nb::arg("temperature") = 0.8f, nb::arg("top_p") = 0.95f, nb::arg("top_k") = 40,
        nb::arg("min_p") = 0.05f, nb::arg("seed") = nb::none(), nb::arg("stop") = std::vector<std::string>{},
        nb::arg("repeat_penalty") = 1.0f, nb::arg("repeat_last_n") = 64, nb::arg("presence_penalty") = 0.0f,
        nb::arg("frequency_penalty") = 0.0f, nb::arg("logit_bias") = std::vector<std::pair<int32_t, float>>{},
        nb::arg("callback") = nb::none(), nb::arg("stop_at_eog") = true, nb::arg("speculative") = nb::none(),
        nb::arg("draft_model") = nb::none(), nb::arg("spec_max") = 16,
        "Appends `prompt` (str or token ids; with BOS when the State is empty) to `state`, then samples "
        "up to max_tokens tokens into it (GIL released). temperature <= 0 is greedy. seed=None continues "
        "the State's own random sequence (a saved State continues where it left off), else seed 0. "
        "callback(token, text) is called with each piece of text ready to show; returning False stops. "
        "Returns a Completion; the State then holds prompt + generated tokens. speculative=\"lookup\" (prompt "
        "lookup) or \"draft\" (with draft_model, a Model of the same vocabulary) decodes speculatively, up to "
        "spec_max guesses per step: the output is bitwise the same (docs/speculative.md).");
}

}  // namespace kvstash::python
