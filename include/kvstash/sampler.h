// Choosing the next token from logits.
//
//   kvstash::SamplerParams params;          // defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
//   params.seed = 42;
//   kvstash::Sampler sampler(params);
//   int32_t next = sampler.sample(state.last_logits(), state.tokens());
//
// The sampler's whole state (its parameters and the RNG) is a plain value, SamplerState: saving it
// and building a new Sampler from it later continues the exact same random sequence. Same seed +
// same logits + same history => same tokens, on every platform (the RNG and the uniform-float
// conversion are kvstash's own, not the standard library's unspecified distributions).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace kvstash {

struct SamplerParams {
    float temperature = 0.8f;       // <= 0: greedy (argmax, lowest id on ties); the other filters are then ignored
    int32_t top_k = 40;             // keep the k most likely; <= 0: off
    float top_p = 0.95f;            // keep the smallest set whose probability reaches p; >= 1: off
    float min_p = 0.05f;            // drop tokens below min_p × the top probability; <= 0: off
    float repeat_penalty = 1.0f;    // llama.cpp-style: logits of tokens in the last repeat_last_n divided (>0) or multiplied (<0); 1: off
    int32_t repeat_last_n = 64;     // window of the history the penalties look at; 0: off, -1: whole history
    float presence_penalty = 0.0f;  // subtracted once from every token present in the window
    float frequency_penalty = 0.0f; // subtracted per occurrence in the window
    std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits before anything else
    uint64_t seed = 0;
};

// Everything needed to resume sampling exactly: parameters and RNG state (xoshiro256**).
struct SamplerState {
    SamplerParams params;
    std::array<uint64_t, 4> rng{};
};

class Sampler {
public:
    explicit Sampler(const SamplerParams& params);  // RNG seeded from params.seed (splitmix64)
    explicit Sampler(const SamplerState& state);    // resumes exactly where `state` was taken
    // Throws Error(invalid_argument) for parameters out of range (negative temperature is allowed
    // and means greedy; top_p, min_p outside [0, 1], a logit_bias id outside the logits, ...).

    // Picks the next token. `history` is the sequence so far (for the penalties); only its last
    // repeat_last_n tokens are used.
    int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

    SamplerState state() const;
    const SamplerParams& params() const;

private:
    SamplerState state_;
    std::vector<float> scratch_logits_;
    std::vector<int32_t> scratch_ids_;
};

}  // namespace kvstash
