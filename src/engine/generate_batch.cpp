// generate_batch() of generate.h: generate()'s loop for several sequences, one eval_batch per step.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "engine/text_stream.h"
#include "kvstash/error.h"
#include "kvstash/generate.h"
#include "kvstash/tokenizer.h"

namespace kvstash {

namespace {

// One sequence while it runs: its text side and, once finished, why.
struct Running {
    const BatchSequence* sequence = nullptr;
    TextStream stream;
    GenerateResult result;
    std::optional<StopReason> stop;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

void validate(std::span<const BatchSequence> sequences) {
    for (size_t i = 0; i < sequences.size(); ++i) {
        const BatchSequence& s = sequences[i];
        const std::string which = "sequence " + std::to_string(i) + ": ";
        if (s.state == nullptr || s.sampler == nullptr) {
            throw Error(ErrorCode::invalid_argument, which + "a State and a Sampler are needed");
        }
        if (s.state->n_tokens() == 0) {
            throw Error(ErrorCode::invalid_argument, which + "its State holds no token; evaluate the prompt first");
        }
        if (s.options.max_tokens < 0) {
            throw Error(ErrorCode::invalid_argument, which + "max_tokens must be >= 0");
        }
        if (s.options.constraint) {
            throw Error(ErrorCode::invalid_argument,
                        which + "a grammar constraint is not supported in batched generation; use generate()");
        }
        for (size_t j = 0; j < i; ++j) {
            if (sequences[j].state == s.state) {
                throw Error(ErrorCode::invalid_argument, which + "its State is also sequence " + std::to_string(j) +
                                                             "'s; give each sequence its own (State::fork())");
            }
        }
    }
}

// generate()'s checks before sampling: nothing to do, or no room for a token.
std::optional<StopReason> stop_before_sampling(const BatchSequence& s) {
    if (s.options.max_tokens == 0) return StopReason::max_tokens;
    if (s.state->n_tokens() >= s.state->n_ctx()) return StopReason::context_full;
    return std::nullopt;
}

// generate()'s checks after a token was evaluated, in its order.
std::optional<StopReason> stop_after_token(Running& r, int32_t token) {
    if (const auto stop = r.stream.push(token)) return stop;
    if (static_cast<int64_t>(r.result.tokens.size()) >= r.sequence->options.max_tokens) return StopReason::max_tokens;
    if (r.sequence->state->n_tokens() >= r.sequence->state->n_ctx()) return StopReason::context_full;
    return std::nullopt;
}

}  // namespace

std::vector<GenerateResult> generate_batch(Evaluator& evaluator, std::span<const BatchSequence> sequences) {
    validate(sequences);
    const Tokenizer& tokenizer = evaluator.model().tokenizer();
    std::vector<Running> running;
    running.reserve(sequences.size());
    for (const BatchSequence& s : sequences) {
        running.push_back(Running{
            &s,
            TextStream(tokenizer, s.options.stop_strings,
                       s.options.stop_at_end_of_generation ? StopAtEndOfGeneration::yes : StopAtEndOfGeneration::no),
            {},
            stop_before_sampling(s)});
    }
    const auto save_samplers = [&] {
        for (Running& r : running) r.sequence->state->set_sampler_state(r.sequence->sampler->state());
    };
    try {
        std::vector<int32_t> tokens(sequences.size());
        std::vector<EvalRequest> requests;
        std::vector<Running*> stepping;
        while (true) {
            requests.clear();
            stepping.clear();
            for (size_t i = 0; i < running.size(); ++i) {
                Running& r = running[i];
                if (r.stop) continue;
                State& state = *r.sequence->state;
                tokens[i] = r.sequence->sampler->sample(state.last_logits(), state.tokens());
                if (r.sequence->options.on_sample) r.sequence->options.on_sample(state.last_logits(), tokens[i]);
                requests.push_back(EvalRequest{&state, std::span<const int32_t>(&tokens[i], 1)});
                stepping.push_back(&r);
            }
            if (requests.empty()) break;
            evaluator.eval_batch(requests);
            for (size_t k = 0; k < stepping.size(); ++k) {
                Running& r = *stepping[k];
                const int32_t token = requests[k].tokens[0];
                r.result.tokens.push_back(token);
                r.stop = stop_after_token(r, token);
            }
        }
    } catch (...) {
        save_samplers();
        throw;
    }
    save_samplers();
    std::vector<GenerateResult> results;
    results.reserve(running.size());
    for (Running& r : running) {
        r.result.stop = *r.stop;
        r.result.text = r.stream.take_text();
        r.result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
        results.push_back(std::move(r.result));
    }
    return results;
}

}  // namespace kvstash
