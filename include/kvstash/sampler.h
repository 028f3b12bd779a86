// Choosing the next token from logits.
//
//   kvstash::SamplerParams params;          // defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
//   params.seed = 42;
//   kvstash::Sampler sampler(params);
//   int32_t next = sampler.sample(state.last_logits(), state.tokens());
//
// The sampler's whole state (its parameters and the RNG) is a plain value, SamplerState: saving it
// and building a new Sampler from it later continues the exact same random sequence. Same seed +
// same logits + same history => same tokens, run after run and whatever the thread count (the RNG and
// the uniform-float conversion are kvstash's own, not the standard library's unspecified
// distributions; every sum runs in one fixed order). Across platforms the one outside ingredient is
// the C library's exp(), whose last bit could differ and, very rarely, move a draw past a boundary.
//
// What sample() does, in this order:
//   1. logit_bias: added to the logits (-INFINITY bans a token).
//   2. penalties, for each distinct token in the window (the last repeat_last_n tokens of `history`)
//      occurring c times: repeat_penalty as llama.cpp (logit > 0: divided, else multiplied), then
//      logit -= c × frequency_penalty + presence_penalty (OpenAI).
//   3. temperature <= 0: the argmax, lowest id on ties; no random number is drawn.
//   4. the candidates (tokens whose logit is not -inf) sorted by logit descending, ties by id
//      ascending; top-k keeps the first k.
//   5. softmax of logit / temperature over them (double precision; the normalising sum in id order).
//   6. top-p keeps the shortest prefix whose probability sum reaches top_p (at least one token).
//   7. min-p drops tokens with probability < min_p × the first token's.
//   8. renormalise (sum in the order of step 4), and draw with one uniform u in [0, 1) from the RNG:
//      the first candidate, in the order of step 4, at which the cumulative probability exceeds u.
// distribution() returns the result of steps 1-8 without drawing.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kvstash/sampler_state.h"

namespace kvstash {

// One entry of the distribution a token is drawn from.
struct TokenProbability {
    int32_t id = 0;
    double probability = 0.0;
};

class Sampler {
public:
    explicit Sampler(const SamplerParams& params);  // RNG seeded from params.seed (splitmix64)
    explicit Sampler(const SamplerState& state);    // resumes exactly where `state` was taken
    // Throws Error(invalid_argument) for parameters out of range: a non-finite temperature (negative
    // is allowed and means greedy), top_p or min_p outside [0, 1], repeat_penalty <= 0, repeat_last_n
    // < -1, non-finite presence/frequency penalties, a logit_bias with a negative id, a NaN or +inf
    // bias; and for a SamplerState whose RNG words are all zero (not taken from a Sampler).

    // Picks the next token. `history` is the sequence so far (for the penalties); only its last
    // repeat_last_n tokens are used. Throws Error(invalid_argument) for empty logits, a NaN or +inf
    // logit, a logit_bias or window token id outside the logits, or when every token is banned (-inf).
    int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

    // The candidates sample() would draw from, most likely first (ties: lowest id first), with their
    // renormalised probabilities; tokens whose probability underflows to zero are left out. Draws no
    // random number. Greedy: the argmax alone, probability 1.
    std::vector<TokenProbability> distribution(std::span<const float> logits, std::span<const int32_t> history) const;

    // sample() over `logits` with every token that `allowed` rejects at -INFINITY (a grammar's mask), found
    // by asking `allowed` about single tokens in step 4's order instead of masking the whole vocabulary:
    // greedy stops at the first allowed one, top-k at the k-th. The same token and the same RNG state as
    // sample() over the masked logits. nullopt, drawing no random number, when that would need every
    // allowed token (top_k <= 0 sampling), more than `max_asked` tokens asked, or when sample() over the
    // masked logits could throw (a NaN or +inf logit, no allowed token): then mask and call sample().
    std::optional<int32_t> sample_allowed(std::span<const float> logits, std::span<const int32_t> history,
                                          const std::function<bool(int32_t)>& allowed, size_t max_asked = 4096);

    SamplerState state() const;
    const SamplerParams& params() const;

    // A copy continues the same random sequence independently.
    Sampler(const Sampler& other);
    Sampler& operator=(const Sampler& other);
    Sampler(Sampler&&) noexcept;
    Sampler& operator=(Sampler&&) noexcept;
    ~Sampler();

private:
    struct Impl;  // the SamplerState and the scratch buffers (src/engine/sampler.cpp)
    std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash
