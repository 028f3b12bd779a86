// The sampling pipeline of sampler.h, steps 1-8, in fixed orders so that results are a function of
// (params, RNG state, logits, history) only.
#include "kvstash/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/rng.h"
#include "kvstash/error.h"

namespace kvstash {

namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::invalid_argument, message); }

std::string str(float v) { return std::to_string(v); }

void validate(const SamplerParams& p) {
    if (!std::isfinite(p.temperature)) invalid("sampler temperature must be a finite number (<= 0 for greedy), got " + str(p.temperature));
    if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) invalid("sampler top_p must be in [0, 1] (1 turns it off), got " + str(p.top_p));
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) invalid("sampler min_p must be in [0, 1] (0 turns it off), got " + str(p.min_p));
    if (!(std::isfinite(p.repeat_penalty) && p.repeat_penalty > 0.0f)) {
        invalid("sampler repeat_penalty must be a finite number > 0 (1 turns it off), got " + str(p.repeat_penalty));
    }
    if (p.repeat_last_n < -1) {
        invalid("sampler repeat_last_n must be >= -1 (-1: whole history, 0: off), got " + std::to_string(p.repeat_last_n));
    }
    if (!std::isfinite(p.presence_penalty)) invalid("sampler presence_penalty must be finite, got " + str(p.presence_penalty));
    if (!std::isfinite(p.frequency_penalty)) invalid("sampler frequency_penalty must be finite, got " + str(p.frequency_penalty));
    for (const auto& [id, bias] : p.logit_bias) {
        if (id < 0) invalid("logit_bias names token id " + std::to_string(id) + "; ids are >= 0");
        if (std::isnan(bias) || bias == INFINITY) {
            invalid("logit_bias for token " + std::to_string(id) + " is " + str(bias) +
                    "; use a finite value (a large one to favour a token, -INFINITY to ban it)");
        }
    }
}

// Steps 1-2: `adjusted` = logits + logit_bias, then the penalties over the window of `history`.
// `window_scratch` is overwritten.
void adjust_logits(const SamplerParams& p, std::span<const float> logits, std::span<const int32_t> history,
                   std::vector<float>& adjusted, std::vector<int32_t>& window_scratch) {
    const auto n_vocab = static_cast<int64_t>(logits.size());
    if (n_vocab == 0) invalid("sampling needs logits, got none (evaluate at least one token first)");
    adjusted.assign(logits.begin(), logits.end());
    for (const auto& [id, bias] : p.logit_bias) {
        if (id >= n_vocab) {
            invalid("logit_bias names token id " + std::to_string(id) + " but the logits have only " +
                    std::to_string(n_vocab) + " entries");
        }
        adjusted[static_cast<size_t>(id)] += bias;
    }
    const bool penalised = p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    if (penalised && p.repeat_last_n != 0 && !history.empty()) {
        const size_t window = p.repeat_last_n < 0 ? history.size()
                                                  : std::min(history.size(), static_cast<size_t>(p.repeat_last_n));
        window_scratch.assign(history.end() - static_cast<std::ptrdiff_t>(window), history.end());
        std::sort(window_scratch.begin(), window_scratch.end());
        for (size_t i = 0; i < window_scratch.size();) {
            const int32_t id = window_scratch[i];
            size_t count = 0;
            while (i < window_scratch.size() && window_scratch[i] == id) ++i, ++count;
            if (id < 0 || id >= n_vocab) {
                invalid("history token id " + std::to_string(id) + " is outside the logits (0.." +
                        std::to_string(n_vocab - 1) + ")");
            }
            float& logit = adjusted[static_cast<size_t>(id)];
            if (p.repeat_penalty != 1.0f) logit = logit > 0.0f ? logit / p.repeat_penalty : logit * p.repeat_penalty;
            logit -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
        }
    }
    for (int64_t i = 0; i < n_vocab; ++i) {
        const float v = adjusted[static_cast<size_t>(i)];
        if (std::isnan(v) || v == INFINITY) {
            invalid("the logit of token " + std::to_string(i) + " is " + str(v) + " after bias and penalties");
        }
    }
}

// Step 3: lowest id among the largest logits.
int32_t argmax(const std::vector<float>& adjusted) {
    size_t best = 0;
    for (size_t i = 1; i < adjusted.size(); ++i) {
        if (adjusted[i] > adjusted[best]) best = i;
    }
    if (adjusted[best] == -INFINITY) invalid("every token is banned (all logits are -inf after logit_bias)");
    return static_cast<int32_t>(best);
}

// Steps 4-8 up to the draw: fills `ids` (sampling order) and `probs` (unnormalised weights
// exp((logit - max) / T), zeroed past the filters' cut) and returns how many candidates are kept
// (ids[0..kept), all with probs > 0) and, through `total`, the sum of their weights in that order.
size_t filter_candidates(const SamplerParams& p, const std::vector<float>& adjusted, std::vector<int32_t>& ids,
                         std::vector<double>& probs, double& total) {
    ids.clear();
    for (size_t i = 0; i < adjusted.size(); ++i) {
        if (adjusted[i] != -INFINITY) ids.push_back(static_cast<int32_t>(i));
    }
    if (ids.empty()) invalid("every token is banned (all logits are -inf after logit_bias)");
    // A strict total order (ids are distinct), so any sorting algorithm gives the same sequence.
    const auto before = [&adjusted](int32_t a, int32_t b) {
        const float la = adjusted[static_cast<size_t>(a)], lb = adjusted[static_cast<size_t>(b)];
        return la > lb || (la == lb && a < b);
    };
    size_t n = ids.size();
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
        n = static_cast<size_t>(p.top_k);
        std::nth_element(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), before);
        ids.resize(n);
    }
    std::sort(ids.begin(), ids.end(), before);

    // Softmax weights; ids[0] holds the maximum, so weights are in (0, 1] and non-increasing.
    const double max_logit = adjusted[static_cast<size_t>(ids[0])];
    const double temperature = p.temperature;
    probs.resize(n);
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
        probs[i] = std::exp((static_cast<double>(adjusted[static_cast<size_t>(ids[i])]) - max_logit) / temperature);
        sum += probs[i];
    }
    size_t kept = n;
    if (p.top_p < 1.0f) {
        const double target = static_cast<double>(p.top_p) * sum;
        double cumulative = 0.0;
        for (size_t i = 0; i < n; ++i) {
            cumulative += probs[i];
            if (cumulative >= target) {
                kept = i + 1;
                break;
            }
        }
    }
    if (p.min_p > 0.0f) {
        const double threshold = static_cast<double>(p.min_p) * probs[0];
        size_t above = 1;  // the first token always passes (min_p <= 1)
        while (above < kept && probs[above] >= threshold) ++above;
        kept = above;
    }
    while (kept > 1 && probs[kept - 1] == 0.0) --kept;  // underflowed to zero: never drawn
    ids.resize(kept);
    probs.resize(kept);
    total = 0.0;
    for (size_t i = 0; i < kept; ++i) total += probs[i];
    return kept;
}

}  // namespace

Sampler::Sampler(const SamplerParams& params) {
    validate(params);
    state_.params = params;
    state_.rng = Rng::seed_state(params.seed);
}

Sampler::Sampler(const SamplerState& state) {
    validate(state.params);
    if (state.rng == std::array<uint64_t, 4>{}) {
        invalid("SamplerState.rng is all zero, which is not a state taken from a Sampler; build the Sampler "
                "from SamplerParams (seeded) instead");
    }
    state_ = state;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
    const SamplerParams& p = state_.params;
    adjust_logits(p, logits, history, scratch_logits_, scratch_ids_);
    if (p.temperature <= 0.0f) return argmax(scratch_logits_);
    double total = 0.0;
    const size_t kept = filter_candidates(p, scratch_logits_, scratch_ids_, scratch_probs_, total);
    Rng rng(state_.rng);
    const double u = rng.uniform_float();
    state_.rng = rng.state();
    // u <= 1 - 2^-24 and `total` is summed in this same order, so u × total < the final cumulative sum:
    // the loop always returns; the fallback only guards the invariant.
    const double target = u * total;
    double cumulative = 0.0;
    for (size_t i = 0; i < kept; ++i) {
        cumulative += scratch_probs_[i];
        if (cumulative > target) return scratch_ids_[i];
    }
    return scratch_ids_[kept - 1];
}

std::vector<TokenProbability> Sampler::distribution(std::span<const float> logits,
                                                    std::span<const int32_t> history) const {
    const SamplerParams& p = state_.params;
    std::vector<float> adjusted;
    std::vector<int32_t> ids;
    adjust_logits(p, logits, history, adjusted, ids);
    if (p.temperature <= 0.0f) return {TokenProbability{argmax(adjusted), 1.0}};
    std::vector<double> probs;
    double total = 0.0;
    const size_t kept = filter_candidates(p, adjusted, ids, probs, total);
    std::vector<TokenProbability> out(kept);
    for (size_t i = 0; i < kept; ++i) out[i] = TokenProbability{ids[i], probs[i] / total};
    return out;
}

SamplerState Sampler::state() const { return state_; }
const SamplerParams& Sampler::params() const { return state_.params; }

}  // namespace kvstash
