// The sampling pipeline of sampler.h, steps 1-8, in fixed orders so that results are a function of
// (params, RNG state, logits, history) only.
#include "kvstash/sampler.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "engine/rng.h"
#include "kvstash/error.h"

namespace kvstash {

namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::invalid_argument, message); }

std::string str(float v) {
    std::ostringstream out;
    out << v;  // 0.95, 1.5, nan, inf
    return out.str();
}

void require(bool ok, const std::string& what, float value) {
    if (!ok) invalid("sampler " + what + ", got " + str(value));
}

void validate(const SamplerParams& p) {
    require(std::isfinite(p.temperature), "temperature must be a finite number (<= 0 for greedy)", p.temperature);
    require(p.top_p >= 0.0f && p.top_p <= 1.0f, "top_p must be in [0, 1] (1 turns it off)", p.top_p);
    require(p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p must be in [0, 1] (0 turns it off)", p.min_p);
    require(std::isfinite(p.repeat_penalty) && p.repeat_penalty > 0.0f,
            "repeat_penalty must be a finite number > 0 (1 turns it off)", p.repeat_penalty);
    if (p.repeat_last_n < -1) {
        invalid("sampler repeat_last_n must be >= -1 (-1: whole history, 0: off), got " +
                std::to_string(p.repeat_last_n));
    }
    require(std::isfinite(p.presence_penalty), "presence_penalty must be finite", p.presence_penalty);
    require(std::isfinite(p.frequency_penalty), "frequency_penalty must be finite", p.frequency_penalty);
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
        const size_t window =
            p.repeat_last_n < 0 ? history.size() : std::min(history.size(), static_cast<size_t>(p.repeat_last_n));
        window_scratch.assign(history.end() - static_cast<std::ptrdiff_t>(window), history.end());
        std::sort(window_scratch.begin(), window_scratch.end());
        for (size_t i = 0; i < window_scratch.size();) {
            const int32_t id = window_scratch[i];
            size_t count = 0;
            for (; i < window_scratch.size() && window_scratch[i] == id; ++i) ++count;
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
    if (adjusted[best] == -INFINITY) invalid("every token is banned (all logits are -inf after bias and penalties)");
    return static_cast<int32_t>(best);
}

// Steps 4-8 up to the draw: fills `ids` (sampling order) and `probs` (their unnormalised weights
// exp((logit - max) / T)) with the kept candidates, all of weight > 0, and returns how many there are
// and, through `total`, the sum of their weights in that order.
size_t filter_candidates(const SamplerParams& p, const std::vector<float>& adjusted, std::vector<int32_t>& ids,
                         std::vector<double>& probs, double& total) {
    ids.clear();
    float max_logit = -INFINITY;
    for (size_t i = 0; i < adjusted.size(); ++i) {
        if (adjusted[i] == -INFINITY) continue;
        ids.push_back(static_cast<int32_t>(i));
        max_logit = std::max(max_logit, adjusted[i]);
    }
    if (ids.empty()) invalid("every token is banned (all logits are -inf after bias and penalties)");
    // A strict total order (ids are distinct), so any sorting algorithm gives the same sequence.
    const auto before = [&adjusted](int32_t a, int32_t b) {
        const float la = adjusted[static_cast<size_t>(a)], lb = adjusted[static_cast<size_t>(b)];
        return la > lb || (la == lb && a < b);
    };
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < ids.size()) {
        std::nth_element(ids.begin(), ids.begin() + p.top_k, ids.end(), before);
        ids.resize(static_cast<size_t>(p.top_k));
        std::sort(ids.begin(), ids.end());  // back to id order for the sum below
    }

    // Softmax weights in (0, 1], the top one exactly exp(0) = 1; the normalising sum in id order.
    const double temperature = p.temperature;
    const auto weight = [&](int32_t id) {
        return std::exp((static_cast<double>(adjusted[static_cast<size_t>(id)]) - max_logit) / temperature);
    };
    double sum = 0.0;
    size_t n = 0;
    for (int32_t id : ids) {
        const double w = weight(id);
        sum += w;
        // min-p before sorting (only the survivors need sorting): its kept set, weight >= min_p × 1,
        // is a prefix of the sampling order, so cutting it first and top-p's prefix after gives the
        // same result as top-p first.
        if (w >= static_cast<double>(p.min_p)) ids[n++] = id;
    }
    ids.resize(n);
    std::sort(ids.begin(), ids.end(), before);
    probs.resize(n);
    for (size_t i = 0; i < n; ++i) probs[i] = weight(ids[i]);

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
        invalid(
            "SamplerState.rng is all zero, which is not a state taken from a Sampler; build the Sampler "
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
