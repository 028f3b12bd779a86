// The sampling pipeline of sampler.h, steps 1-8, in fixed orders so that results are a function of
// (params, RNG state, logits, history) only.
#include "kvstash/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
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

// The sampling order of step 4: logit descending, ids ascending on ties. A strict total order (ids are
// distinct), so any sorting algorithm gives the same sequence.
struct SamplingOrder {
    const std::vector<float>* adjusted;
    bool operator()(int32_t a, int32_t b) const {
        const float la = (*adjusted)[static_cast<size_t>(a)], lb = (*adjusted)[static_cast<size_t>(b)];
        return la > lb || (la == lb && a < b);
    }
};

// Steps 5-8 up to the draw, over the candidates `ids` (id order, the top-k cut made) whose largest logit
// is `max_logit`: keeps in `ids` (sampling order) and `probs` (their unnormalised weights
// exp((logit - max) / T)) the candidates that survive min-p and top-p, all of weight > 0, and returns how
// many there are and, through `total`, the sum of their weights in that order.
size_t weigh_candidates(const SamplerParams& p, const std::vector<float>& adjusted, float max_logit,
                        std::vector<int32_t>& ids, std::vector<double>& probs, double& total) {
    const SamplingOrder before{&adjusted};
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

// Steps 4-8 up to the draw: fills `ids` (sampling order) and `probs` (their unnormalised weights) with the
// kept candidates, all of weight > 0, and returns how many there are and, through `total`, the sum of
// their weights in that order.
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
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < ids.size()) {
        std::nth_element(ids.begin(), ids.begin() + p.top_k, ids.end(), SamplingOrder{&adjusted});
        ids.resize(static_cast<size_t>(p.top_k));
        std::sort(ids.begin(), ids.end());  // back to id order for the sum below
    }
    return weigh_candidates(p, adjusted, max_logit, ids, probs, total);
}

// Step 8's draw: one uniform from the RNG in `rng_state` (advanced), the first of the `kept` candidates at
// which the cumulative weight exceeds u × total.
int32_t draw(std::array<uint64_t, 4>& rng_state, const std::vector<int32_t>& ids, const std::vector<double>& probs,
             size_t kept, double total) {
    Rng rng(rng_state);
    const double u = rng.uniform_float();
    rng_state = rng.state();
    // u <= 1 - 2^-24 and `total` is summed in this same order, so u × total < the final cumulative sum:
    // the loop always returns; the fallback only guards the invariant.
    const double target = u * total;
    double cumulative = 0.0;
    for (size_t i = 0; i < kept; ++i) {
        cumulative += probs[i];
        if (cumulative > target) return ids[i];
    }
    return ids[kept - 1];
}

enum class Walk { stopped, exhausted, limit };

// Calls visit(id) on the candidates (tokens whose adjusted logit is not -inf) in the sampling order until
// it returns false (stopped), every candidate was visited (exhausted) or `limit` were (limit). In batches
// of `first`, 16 × first, 256 × first ... tokens: each batch is the best tokens after the last one
// visited, found by one pass over the vocabulary with a bounded heap (`heap` is scratch), so a walk that
// stops in its first batch costs about one argmax pass.
template <typename Visit>
Walk walk_candidates(const std::vector<float>& adjusted, size_t first, size_t limit, std::vector<int32_t>& heap,
                     Visit&& visit) {
    const SamplingOrder before{&adjusted};
    const auto n = static_cast<int32_t>(adjusted.size());
    size_t visited = 0, batch = first;
    int32_t last = -1;  // the last token visited; -1: none yet
    while (true) {
        const size_t size = std::min(batch, limit - visited);
        if (size == 0) return Walk::limit;
        heap.clear();
        size_t remaining = 0;  // candidates not visited yet
        for (int32_t id = 0; id < n; ++id) {
            if (adjusted[static_cast<size_t>(id)] == -INFINITY || (last >= 0 && !before(last, id))) continue;
            ++remaining;
            if (heap.size() < size) {
                heap.push_back(id);
                std::push_heap(heap.begin(), heap.end(), before);  // front: the last in sampling order
            } else if (before(id, heap.front())) {
                std::pop_heap(heap.begin(), heap.end(), before);
                heap.back() = id;
                std::push_heap(heap.begin(), heap.end(), before);
            }
        }
        std::sort_heap(heap.begin(), heap.end(), before);
        for (const int32_t id : heap) {
            ++visited;
            if (!visit(id)) return Walk::stopped;
        }
        if (heap.size() == remaining) return Walk::exhausted;
        last = heap.back();
        batch *= 16;
    }
}

}  // namespace

struct Sampler::Impl {
    SamplerState state;
    std::vector<float> scratch_logits;  // (n_vocab) logits after bias and penalties
    std::vector<int32_t> scratch_ids;   // the penalty window, then the candidate ids in sampling order
    std::vector<double> scratch_probs;  // probabilities of scratch_ids, same order
    std::vector<int32_t> scratch_heap;  // sample_allowed: the next batch of candidates
};

Sampler::Sampler(const SamplerParams& params) : impl_(std::make_unique<Impl>()) {
    validate(params);
    impl_->state.params = params;
    impl_->state.rng = Rng::seed_state(params.seed);
}

Sampler::Sampler(const SamplerState& state) : impl_(std::make_unique<Impl>()) {
    validate(state.params);
    if (state.rng == std::array<uint64_t, 4>{}) {
        invalid(
            "SamplerState.rng is all zero, which is not a state taken from a Sampler; build the Sampler "
            "from SamplerParams (seeded) instead");
    }
    impl_->state = state;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
    const SamplerParams& p = impl_->state.params;
    adjust_logits(p, logits, history, impl_->scratch_logits, impl_->scratch_ids);
    if (p.temperature <= 0.0f) return argmax(impl_->scratch_logits);
    double total = 0.0;
    const size_t kept = filter_candidates(p, impl_->scratch_logits, impl_->scratch_ids, impl_->scratch_probs, total);
    return draw(impl_->state.rng, impl_->scratch_ids, impl_->scratch_probs, kept, total);
}

// The masked logits' candidates are the allowed tokens among these candidates, in the same order with the
// same adjusted logits (bias and penalties act on each token alone; a disallowed token at -inf stays -inf).
// Greedy: the argmax over them is the first allowed one. Top-k: the k first allowed ones are the masked
// top-k set, and steps 5-8 look at nothing else (max_logit is its first one's).
std::optional<int32_t> Sampler::sample_allowed(std::span<const float> logits, std::span<const int32_t> history,
                                               const std::function<bool(int32_t)>& allowed, size_t max_asked) {
    const SamplerParams& p = impl_->state.params;
    const bool greedy = p.temperature <= 0.0f;
    if (!greedy && p.top_k <= 0) return std::nullopt;  // the normalising sum needs every allowed token
    try {
        adjust_logits(p, logits, history, impl_->scratch_logits, impl_->scratch_ids);
    } catch (const Error&) {
        // A NaN or +inf on a token the mask would have set to -inf is no error there: let the masked
        // path decide (it throws exactly when sample() over the masked logits does).
        return std::nullopt;
    }
    std::vector<int32_t>& ids = impl_->scratch_ids;
    ids.clear();
    const size_t wanted = greedy ? 1 : static_cast<size_t>(p.top_k);
    const Walk walk = walk_candidates(impl_->scratch_logits, wanted, max_asked, impl_->scratch_heap, [&](int32_t id) {
        if (allowed(id)) ids.push_back(id);
        return ids.size() < wanted;
    });
    // limit: more allowed tokens may follow; none: sample() throws, or the mask allows nothing.
    if (walk == Walk::limit || ids.empty()) return std::nullopt;
    if (greedy) return ids.front();
    const float max_logit = impl_->scratch_logits[static_cast<size_t>(ids.front())];
    std::sort(ids.begin(), ids.end());  // id order, as filter_candidates leaves them
    double total = 0.0;
    const size_t kept = weigh_candidates(p, impl_->scratch_logits, max_logit, ids, impl_->scratch_probs, total);
    return draw(impl_->state.rng, impl_->scratch_ids, impl_->scratch_probs, kept, total);
}

std::vector<TokenProbability> Sampler::distribution(std::span<const float> logits,
                                                    std::span<const int32_t> history) const {
    const SamplerParams& p = impl_->state.params;
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

Sampler::Sampler(const Sampler& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Sampler& Sampler::operator=(const Sampler& other) {
    if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
    return *this;
}
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;
Sampler::~Sampler() = default;

SamplerState Sampler::state() const { return impl_->state; }
const SamplerParams& Sampler::params() const { return impl_->state.params; }

}  // namespace kvstash
