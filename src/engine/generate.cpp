// The generation loop of generate.h; the text side (stop strings, hold-back, UTF-8) is TextStream.
#include "kvstash/generate.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "engine/constrained_sample.h"
#include "engine/speculative_generate.h"
#include "engine/text_stream.h"
#include "kvstash/error.h"
#include "kvstash/tokenizer.h"

namespace kvstash {

namespace {

void validate(const State& state, const GenerateOptions& options) {
    if (state.n_tokens() == 0) {
        throw Error(ErrorCode::invalid_argument,
                    "generate() needs a state holding at least one token; evaluate the prompt first");
    }
    if (options.max_tokens < 0) {
        throw Error(ErrorCode::invalid_argument, "max_tokens must be >= 0, got " + std::to_string(options.max_tokens));
    }
    for (const std::string& stop : options.stop_strings) {
        if (stop.empty()) {
            throw Error(ErrorCode::invalid_argument,
                        "a stop string is empty (it would match before any text); remove it");
        }
    }
}

}  // namespace

const char* stop_reason_name(StopReason reason) {
    switch (reason) {
        case StopReason::end_of_generation: return "end_of_generation";
        case StopReason::stop_string: return "stop_string";
        case StopReason::max_tokens: return "max_tokens";
        case StopReason::callback: return "callback";
        case StopReason::context_full: return "context_full";
    }
    return "unknown";
}

GenerateResult generate(Evaluator& evaluator, State& state, Sampler& sampler, const GenerateOptions& options,
                        const TokenCallback& on_text) {
    validate(state, options);
    if (options.drafter) return generate_speculative(evaluator, state, sampler, options, on_text);
    const auto start = std::chrono::steady_clock::now();
    const Tokenizer& tokenizer = evaluator.model().tokenizer();
    GenerateResult result;
    TextStream stream(tokenizer, options.stop_strings,
                      options.stop_at_end_of_generation ? StopAtEndOfGeneration::yes : StopAtEndOfGeneration::no);
    // Passes a piece to the callback; true when there was nothing to pass.
    auto emit = [&on_text](int32_t token, std::string_view piece) {
        return piece.empty() || !on_text || on_text(token, piece);
    };
    bool callback_stopped = false;
    std::vector<float> masked;  // scratch: the logits with the grammar's disallowed tokens at -inf
    try {
        if (options.max_tokens == 0) {
            result.stop = StopReason::max_tokens;
        } else if (state.n_tokens() >= state.n_ctx()) {
            result.stop = StopReason::context_full;
        } else {
            while (true) {
                const std::span<const float> logits = state.last_logits();
                int32_t token;
                if (options.constraint) {
                    if (options.constraint->must_end()) {
                        result.stop = StopReason::end_of_generation;
                        break;
                    }
                    const auto allowed =
                        sample_constrained(sampler, *options.constraint, logits, state.tokens(), masked);
                    if (!allowed) {
                        throw Error(ErrorCode::invalid_argument,
                                    "the grammar allows no token of this model's vocabulary after the " +
                                        std::to_string(result.tokens.size()) +
                                        " tokens generated (it needs a character no token can spell here)");
                    }
                    token = *allowed;
                } else {
                    token = sampler.sample(logits, state.tokens());
                }
                if (options.constraint) options.constraint->accept(token);
                if (options.on_sample) options.on_sample(state.last_logits(), token);
                evaluator.eval(state, std::span<const int32_t>(&token, 1));
                result.tokens.push_back(token);
                if (const auto stop = stream.push(token)) {
                    result.stop = *stop;
                    break;
                }
                if (static_cast<int64_t>(result.tokens.size()) >= options.max_tokens) {
                    result.stop = StopReason::max_tokens;
                    break;
                }
                if (state.n_tokens() >= state.n_ctx()) {
                    result.stop = StopReason::context_full;
                    break;
                }
                if (!emit(token, stream.take_ready())) {
                    result.stop = StopReason::callback;
                    callback_stopped = true;
                    break;
                }
            }
        }
        if (!callback_stopped && !result.tokens.empty()) emit(result.tokens.back(), stream.take_rest());
    } catch (...) {
        state.set_sampler_state(sampler.state());
        throw;
    }
    state.set_sampler_state(sampler.state());
    result.text = stream.take_text();
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
}

}  // namespace kvstash
