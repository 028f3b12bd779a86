// The generation loop of generate.h and its text stream: stop-string cutting and hold-back, and
// UTF-8-complete streaming.
#include "kvstash/generate.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <string>

#include "engine/utf8.h"
#include "kvstash/error.h"
#include "kvstash/tokenizer.h"

namespace kvstash {

namespace {

// The generated text and how much of it has been passed to the callback. Invariant: no stop string
// can begin before emitted_ (text that could be the start of one is never emitted), so searches start
// there and look at a few bytes only.
class TextStream {
public:
    TextStream(const std::vector<std::string>& stop_strings, const TokenCallback& on_text)
        : stops_(stop_strings), on_text_(on_text) {}

    // Appends a token's bytes. Returns true when a stop string is now complete; the text is then cut
    // before its first occurrence.
    bool append(std::string_view piece) {
        text_ += piece;
        size_t first = std::string::npos;
        for (const std::string& stop : stops_) first = std::min(first, text_.find(stop, emitted_));
        if (first == std::string::npos) return false;
        text_.resize(first);
        return true;
    }

    // Passes on what is ready; returns the callback's answer (true when nothing was passed).
    bool emit_ready(int32_t token) {
        const size_t end = ready_end();
        if (end <= emitted_) return true;
        const std::string_view piece(text_.data() + emitted_, end - emitted_);
        emitted_ = end;
        return !on_text_ || on_text_(token, piece);
    }

    // Passes on everything left (the end of generation resolves every hold-back).
    void flush(int32_t token) {
        if (emitted_ >= text_.size()) return;
        const std::string_view piece(text_.data() + emitted_, text_.size() - emitted_);
        emitted_ = text_.size();
        if (on_text_) on_text_(token, piece);
    }

    std::string take_text() { return std::move(text_); }

private:
    // End of the text that can be shown now: before the earliest position from which the rest of the
    // text is a proper prefix of a stop string, and not inside an incomplete UTF-8 character.
    size_t ready_end() const {
        size_t hold = text_.size();
        for (size_t i = emitted_; i < text_.size() && hold == text_.size(); ++i) {
            const size_t rest = text_.size() - i;
            for (const std::string& stop : stops_) {
                if (rest < stop.size() && stop.compare(0, rest, text_, i, rest) == 0) {
                    hold = i;
                    break;
                }
            }
        }
        const size_t end = hold - utf8::incomplete_tail_length(std::string_view(text_).substr(0, hold));
        return std::max(end, emitted_);
    }

    const std::vector<std::string>& stops_;
    const TokenCallback& on_text_;
    std::string text_;
    size_t emitted_ = 0;
};

void validate(const State& state, const GenerateOptions& options) {
    if (state.n_tokens() == 0) {
        throw Error(ErrorCode::invalid_argument,
                    "generate() needs a state holding at least one token; evaluate the prompt first");
    }
    if (options.max_tokens < 0) {
        throw Error(ErrorCode::invalid_argument,
                    "max_tokens must be >= 0, got " + std::to_string(options.max_tokens));
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
    const auto start = std::chrono::steady_clock::now();
    const Tokenizer& tokenizer = evaluator.model().tokenizer();
    GenerateResult result;
    TextStream stream(options.stop_strings, on_text);
    bool callback_stopped = false;
    try {
        if (options.max_tokens == 0) {
            result.stop = StopReason::max_tokens;
        } else if (state.n_tokens() >= state.n_ctx()) {
            result.stop = StopReason::context_full;
        } else {
            while (true) {
                const int32_t token = sampler.sample(state.last_logits(), state.tokens());
                if (options.on_sample) options.on_sample(state.last_logits(), token);
                evaluator.eval(state, std::span<const int32_t>(&token, 1));
                result.tokens.push_back(token);
                if (tokenizer.is_eog(token)) {
                    if (options.stop_at_end_of_generation) {
                        result.stop = StopReason::end_of_generation;
                        break;
                    }
                } else if (stream.append(tokenizer.token_piece(token))) {
                    result.stop = StopReason::stop_string;
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
                if (!stream.emit_ready(token)) {
                    result.stop = StopReason::callback;
                    callback_stopped = true;
                    break;
                }
            }
        }
        if (!callback_stopped && !result.tokens.empty()) stream.flush(result.tokens.back());
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
