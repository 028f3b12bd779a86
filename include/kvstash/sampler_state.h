// The sampler's parameters and its whole state as plain values (see sampler.h): a State keeps one so that
// a saved state continues the same random sequence.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace kvstash {

struct SamplerParams {
    float temperature = 0.8f;  // <= 0: greedy (argmax, lowest id on ties); the other filters are then ignored
    int32_t top_k = 40;        // keep the k most likely; <= 0: off
    float top_p = 0.95f;       // keep the smallest set whose probability reaches p; >= 1: off
    float min_p = 0.05f;       // drop tokens below min_p × the top probability; <= 0: off
    // llama.cpp-style: logits of tokens in the last repeat_last_n divided (>0) or multiplied (<=0); 1: off.
    float repeat_penalty = 1.0f;
    int32_t repeat_last_n = 64;      // window of the history the penalties look at; 0: off, -1: whole history
    float presence_penalty = 0.0f;   // subtracted once from every token present in the window
    float frequency_penalty = 0.0f;  // subtracted per occurrence in the window
    std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias) added to the logits before anything else
    uint64_t seed = 0;
};

// Everything needed to resume sampling exactly: parameters and RNG state (xoshiro256**).
struct SamplerState {
    SamplerParams params;
    std::array<uint64_t, 4> rng{};  // never all zero in a state taken from a Sampler
};

}  // namespace kvstash
