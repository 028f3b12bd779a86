// The speculative generation loop of speculative_generate.h. It mirrors generate()'s loop step for step
// (sample -> grammar accept -> on_sample -> evaluated -> stop checks -> emit); only *when* a token is
// evaluated changes: a sampled token is evaluated together with the drafter's guesses for the tokens after
// it, and each guess is then checked against what the sampler draws from the logits it produced.
//
// Round, with c = tokens verified so far (State::tokens()[0..c) is exactly plain decoding's sequence):
//   pending token t (sampled, not yet evaluated), draft d1..dk
//   eval [t, d1..dk] -> rows L1..L(k+1); c += 1 (t is verified: it was sampled)
//   for i in 1..k: s = sample(L_i, history tokens[0..c)); s == d_i ? c += 1 : (t = s, cut the state to c, next round)
//   all accepted: the next token is sampled from L(k+1), the state's own last logits.
// The sampler, the grammar and the callbacks see exactly the tokens plain decoding gives them, in the same
// order, from bitwise the same logits (batch invariance), so they advance exactly as there. Sliding-window
// layers (Gemma 3) are trimmed during a round only as far as after the pending token alone
// (StateAccess::hold_trim_for_guesses), so the window plain decoding still reads is never released.
#include "engine/speculative_generate.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/constrained_sample.h"
#include "engine/text_stream.h"
#include "kvstash/error.h"
#include "kvstash/speculative.h"
#include "kvstash/tokenizer.h"
#include "state/state_access.h"

namespace kvstash {

namespace {

void validate_speculation(const SpeculationOptions& spec) {
    if (spec.max_draft < 1) {
        throw Error(ErrorCode::invalid_argument,
                    "the speculative draft length must be >= 1, got " + std::to_string(spec.max_draft));
    }
    if (spec.min_draft < 0 || spec.min_draft > spec.max_draft) {
        throw Error(ErrorCode::invalid_argument, "the minimum draft length must lie in [0, " +
                                                     std::to_string(spec.max_draft) + "], got " +
                                                     std::to_string(spec.min_draft));
    }
}

class SpeculativeLoop {
public:
    SpeculativeLoop(Evaluator& evaluator, State& state, Sampler& sampler, const GenerateOptions& options,
                    const TokenCallback& on_text)
        : evaluator_(evaluator),
          state_(state),
          sampler_(sampler),
          options_(options),
          on_text_(on_text),
          tokenizer_(evaluator.model().tokenizer()),
          stream_(tokenizer_, options.stop_strings,
                  options.stop_at_end_of_generation ? StopAtEndOfGeneration::yes : StopAtEndOfGeneration::no),
          verified_(state.n_tokens()),
          draft_policy_(options.speculation, options.drafter->costs_nothing()) {}

    GenerateResult run() {
        try {
            if (options_.max_tokens == 0) {
                result_.stop = StopReason::max_tokens;
            } else if (state_.n_tokens() >= state_.n_ctx()) {
                result_.stop = StopReason::context_full;
            } else {
                loop();
            }
            if (!callback_stopped_ && !result_.tokens.empty()) emit(result_.tokens.back(), stream_.take_rest());
        } catch (...) {
            // Positions past the verified ones were never decided: they must not stay in the state.
            if (state_.n_tokens() > verified_) state_.truncate(verified_);
            StateAccess::settle_guesses(state_);
            state_.set_sampler_state(sampler_.state());
            throw;
        }
        state_.set_sampler_state(sampler_.state());
        result_.text = stream_.take_text();
        return std::move(result_);
    }

private:
    void loop() {
        std::optional<int32_t> pending;
        std::span<const float> logits = state_.last_logits();
        const auto n_vocab = static_cast<size_t>(evaluator_.model().info().n_vocab);
        while (true) {
            if (!pending) {
                pending = decide(logits);
                if (!pending) return;  // the grammar is complete
                if (shadow_guess_) draft_policy_.shadow_checked(*shadow_guess_ == *pending);
            }
            shadow_guess_.reset();
            const int32_t token = *pending;
            pending.reset();
            propose_after(token);
            batch_.assign(1, token);
            batch_.insert(batch_.end(), draft_.begin(), draft_.end());
            if (draft_.empty()) {
                evaluator_.eval(state_, batch_);
            } else {
                // Sliding-window layers are trimmed as after `token` alone until the guesses are decided
                // (settled by the round's end or finish()).
                StateAccess::hold_trim_for_guesses(state_, verified_ + 1);
                evaluator_.eval(state_, batch_, &batch_logits_);
                ++result_.verify_rounds;
                result_.drafted += static_cast<int64_t>(draft_.size());
            }
            ++verified_;
            if (stops_after(token)) return finish();
            size_t accepted = 0;
            for (; accepted < draft_.size(); ++accepted) {
                logits = std::span<const float>(batch_logits_).subspan(accepted * n_vocab, n_vocab);
                const auto sampled = decide(logits);
                if (!sampled) {
                    result_.accepted += static_cast<int64_t>(accepted);
                    return finish();
                }
                if (*sampled != draft_[accepted]) {
                    pending = sampled;
                    break;
                }
                ++verified_;
                if (stops_after(*sampled)) {
                    result_.accepted += static_cast<int64_t>(accepted + 1);
                    return finish();
                }
            }
            result_.accepted += static_cast<int64_t>(accepted);
            if (!draft_.empty()) adapt_draft_length(accepted);
            if (pending) {
                state_.truncate(verified_);  // the rejected guesses go; the pending token is evaluated next round
            } else {
                logits = state_.last_logits();  // every guess was right: the batch's last row
            }
            StateAccess::settle_guesses(state_);
        }
    }

    // The token plain decoding picks from `logits` (after the verified tokens), advancing the grammar and
    // calling on_sample as it does; nullopt when the grammar is complete (generation ends there).
    std::optional<int32_t> decide(std::span<const float> logits) {
        const auto history = state_.tokens().first(static_cast<size_t>(verified_));
        int32_t token;
        if (options_.constraint) {
            if (options_.constraint->must_end()) {
                result_.stop = StopReason::end_of_generation;
                return std::nullopt;
            }
            const auto allowed = sample_constrained(sampler_, *options_.constraint, logits, history, masked_);
            if (!allowed) {
                throw Error(ErrorCode::invalid_argument,
                            "the grammar allows no token of this model's vocabulary after the " +
                                std::to_string(result_.tokens.size()) +
                                " tokens generated (it needs a character no token can spell here)");
            }
            token = *allowed;
            options_.constraint->accept(token);
        } else {
            token = sampler_.sample(logits, history);
        }
        if (options_.on_sample) options_.on_sample(logits, token);
        return token;
    }

    // Fills draft_ with the drafter's guesses after the verified tokens and `token`, as many as can still
    // be used (max_tokens, the context) and the adaptive length allow; none when `token` ends generation.
    void propose_after(int32_t token) {
        draft_.clear();
        const int64_t left_to_generate = options_.max_tokens - static_cast<int64_t>(result_.tokens.size()) - 1;
        const int64_t context_left = state_.n_ctx() - verified_ - 1;
        const int32_t length = draft_policy_.round_length();
        // Paused with a drafter that costs nothing: one guess, checked against the next token, never verified.
        const bool shadow = length == 0 && draft_policy_.wants_shadow_guess();
        const int64_t want = std::min<int64_t>({shadow ? 1 : length, left_to_generate, context_left});
        if (want < 1 || (!shadow && want < options_.speculation.min_draft)) return;
        if (options_.stop_at_end_of_generation && tokenizer_.is_eog(token)) return;
        const auto verified = state_.tokens().first(static_cast<size_t>(verified_));
        context_.assign(verified.begin(), verified.end());
        context_.push_back(token);
        options_.drafter->propose(context_, static_cast<int32_t>(want), draft_);
        if (shadow) {
            if (!draft_.empty()) shadow_guess_ = draft_.front();
            draft_.clear();
            return;
        }
        if (static_cast<int64_t>(draft_.size()) > want) draft_.resize(static_cast<size_t>(want));
        if (static_cast<int64_t>(draft_.size()) < options_.speculation.min_draft) draft_.clear();
    }

    void adapt_draft_length(size_t accepted) { draft_policy_.verified(draft_.size(), accepted); }

    // generate()'s checks after a token is evaluated, in its order; true: generation ends here.
    bool stops_after(int32_t token) {
        result_.tokens.push_back(token);
        if (const auto stop = stream_.push(token)) {
            result_.stop = *stop;
            return true;
        }
        if (static_cast<int64_t>(result_.tokens.size()) >= options_.max_tokens) {
            result_.stop = StopReason::max_tokens;
            return true;
        }
        if (verified_ >= state_.n_ctx()) {
            result_.stop = StopReason::context_full;
            return true;
        }
        if (!emit(token, stream_.take_ready())) {
            result_.stop = StopReason::callback;
            callback_stopped_ = true;
            return true;
        }
        return false;
    }

    // Generation ends after the verified tokens: guesses evaluated after them are cut, and the last verified
    // token evaluated again alone so that the state holds its logits (State::truncate drops them), bitwise
    // those the batch computed.
    void finish() {
        if (state_.n_tokens() != verified_) {
            const int32_t last = state_.tokens()[static_cast<size_t>(verified_ - 1)];
            state_.truncate(verified_ - 1);
            evaluator_.eval(state_, std::span<const int32_t>(&last, 1));
        }
        StateAccess::settle_guesses(state_);
    }

    bool emit(int32_t token, std::string_view piece) { return piece.empty() || !on_text_ || on_text_(token, piece); }

    Evaluator& evaluator_;
    State& state_;
    Sampler& sampler_;
    const GenerateOptions& options_;
    const TokenCallback& on_text_;
    const Tokenizer& tokenizer_;
    TextStream stream_;
    GenerateResult result_;
    int64_t verified_;                     // tokens of the state decided as plain decoding would (the rest are guesses)
    DraftLengthPolicy draft_policy_;       // how many guesses each round asks for
    std::optional<int32_t> shadow_guess_;  // paused: the drafter's unverified guess for the next token
    bool callback_stopped_ = false;
    std::vector<int32_t> draft_;       // this round's guesses
    std::vector<int32_t> batch_;       // the pending token and the guesses: one eval
    std::vector<int32_t> context_;     // what the drafter sees: verified tokens + the pending one
    std::vector<float> batch_logits_;  // (batch_.size() × n_vocab) rows of the verification eval
    std::vector<float> masked_;        // scratch of sample_constrained
};

}  // namespace

void check_speculation_supported(const State& state) {
    if (!StateAccess::recurrent(state).empty()) {
        throw Error(ErrorCode::unsupported,
                    "speculative decoding is not offered for models with recurrent layers (Mamba, hybrids): cutting "
                    "rejected guesses back would leave other recurrent checkpoints than plain decoding; decode "
                    "without --spec");
    }
}

GenerateResult generate_speculative(Evaluator& evaluator, State& state, Sampler& sampler,
                                    const GenerateOptions& options, const TokenCallback& on_text) {
    validate_speculation(options.speculation);
    check_speculation_supported(state);
    const auto start = std::chrono::steady_clock::now();
    GenerateResult result = SpeculativeLoop(evaluator, state, sampler, options, on_text).run();
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
}

}  // namespace kvstash
