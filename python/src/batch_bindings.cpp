// Model.complete_batch: several States (new prompts or forks) decoded together through the evaluator's
// batching (generate_batch: one eval_batch per step), with the GIL released; each result bitwise what
// Model.complete on that State alone gives. (kvstash/__init__.py builds generate_batch on it.)
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "py_types.h"

namespace kvstash::python {

namespace {

std::vector<Completion> complete_batch(PyModel& m, const std::vector<PyState*>& py_states, const nb::handle& prompts,
                                       int64_t max_tokens, float temperature, float top_p, int32_t top_k, float min_p,
                                       std::optional<uint64_t> seed, std::vector<std::string> stop,
                                       float repeat_penalty, int32_t repeat_last_n, float presence_penalty,
                                       float frequency_penalty, std::vector<std::pair<int32_t, float>> logit_bias,
                                       bool stop_at_eog) {
    const size_t n = py_states.size();
    if (nb::isinstance<nb::str>(prompts)) {
        throw Error(ErrorCode::invalid_argument, "complete_batch: prompts must be a list (one per state), not a str");
    }
    std::vector<nb::object> prompt_items;
    if (prompts.is_none()) {
        prompt_items.assign(n, nb::none());
    } else {
        for (nb::handle item : prompts) prompt_items.push_back(nb::borrow(item));  // str, token ids or None
    }
    if (prompt_items.size() != n) {
        throw Error(ErrorCode::invalid_argument, "complete_batch: " + std::to_string(prompt_items.size()) +
                                                     " prompts for " + std::to_string(n) +
                                                     " states; give one per state (None: append nothing)");
    }
    std::vector<std::unique_ptr<PyState::Busy>> busy;
    std::vector<std::vector<int32_t>> tokens(n);
    for (size_t i = 0; i < n; ++i) {
        if (py_states[i] == nullptr) throw Error(ErrorCode::invalid_argument, "complete_batch: a state is None");
        if (&py_states[i]->model() != &m) {
            throw Error(ErrorCode::invalid_argument,
                        "complete_batch: state " + std::to_string(i) + " belongs to another Model");
        }
        for (size_t j = 0; j < i; ++j) {
            if (py_states[j] == py_states[i]) {
                throw Error(ErrorCode::invalid_argument, "complete_batch: state " + std::to_string(i) +
                                                             " is also state " + std::to_string(j) +
                                                             "; give each sequence its own (State.fork())");
            }
        }
        busy.push_back(std::make_unique<PyState::Busy>(*py_states[i]));
        tokens[i] = prompt_tokens(m.model(), prompt_items[i], py_states[i]->get().n_tokens() == 0);
    }
    const SamplingArgs args{temperature,
                            top_p,
                            top_k,
                            min_p,
                            repeat_penalty,
                            repeat_last_n,
                            presence_penalty,
                            frequency_penalty,
                            seed,
                            std::move(logit_bias)};
    GenerateOptions options;
    options.max_tokens = max_tokens;
    options.stop_strings = std::move(stop);
    options.stop_at_end_of_generation = stop_at_eog;
    std::vector<State*> states;
    for (PyState* s : py_states) states.push_back(&s->mutate());
    std::vector<GenerateResult> results;
    {
        nb::gil_scoped_release release;
        PyModel::Lease evaluator = m.lease();
        // The prompts, in one batch (as complete() evaluates each, bitwise).
        std::vector<EvalRequest> prompt_requests;
        for (size_t i = 0; i < n; ++i) {
            State& state = *states[i];
            if (tokens[i].empty() && state.n_tokens() > 0 && state.last_logits().empty()) {
                // After truncate() the last position's logits are gone: evaluate its token again.
                tokens[i].push_back(state.tokens().back());
                state.truncate(state.n_tokens() - 1);
            }
            prompt_requests.push_back(EvalRequest{&state, tokens[i]});
        }
        (*evaluator).eval_batch(prompt_requests);
        std::vector<Sampler> samplers;
        samplers.reserve(n);
        std::vector<BatchSequence> sequences;
        for (size_t i = 0; i < n; ++i) {
            samplers.push_back(make_sampler(args, states[i]->sampler_state()));
            sequences.push_back(BatchSequence{states[i], &samplers.back(), options});
        }
        results = generate_batch(*evaluator, sequences);
    }
    std::vector<Completion> out;
    for (size_t i = 0; i < n; ++i) {
        const auto prompt_end = states[i]->n_tokens() - static_cast<int64_t>(results[i].tokens.size());
        out.push_back(Completion{std::move(results[i].text), std::move(results[i].tokens),
                                 stop_reason_name(results[i].stop), results[i].seconds, prompt_end});
    }
    return out;
}

}  // namespace

void bind_batch(ModelClass& model_class) {
    model_class.def("complete_batch", &complete_batch, nb::arg("states"), nb::arg("prompts") = nb::none(),
                    nb::arg("max_tokens") = 256, nb::kw_only(), nb::arg("temperature") = 0.8f, nb::arg("top_p") = 0.95f,
                    nb::arg("top_k") = 40, nb::arg("min_p") = 0.05f, nb::arg("seed") = nb::none(),
                    nb::arg("stop") = std::vector<std::string>{}, nb::arg("repeat_penalty") = 1.0f,
                    nb::arg("repeat_last_n") = 64, nb::arg("presence_penalty") = 0.0f,
                    nb::arg("frequency_penalty") = 0.0f,
                    nb::arg("logit_bias") = std::vector<std::pair<int32_t, float>>{}, nb::arg("stop_at_eog") = true,
                    "Model.complete for several States at once, decoded together: each step samples one token per "
                    "unfinished State and evaluates them all in one batched pass (not threads). prompts: None, or one "
                    "prompt (str, token ids or None) per State, appended first (together). The States must be distinct "
                    "(forks of one prefix are fine). Each Completion, State and random sequence is bitwise what "
                    "complete() on that State alone gives with the same arguments. Returns a list of Completion.");
}

}  // namespace kvstash::python
