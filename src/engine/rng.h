// kvstash's own random number generator, so that a seed gives the same sequence on every platform
// (std::mt19937 is portable but std::uniform_real_distribution is not).
//
// xoshiro256** 1.0 (Blackman & Vigna, prng.di.unimi.it), its 256-bit state seeded from a 64-bit seed by
// four outputs of splitmix64, as the authors recommend.
#pragma once

#include <array>
#include <cstdint>

namespace kvstash {

class Rng {
public:
    using StateWords = std::array<uint64_t, 4>;

    explicit Rng(uint64_t seed) : s_(seed_state(seed)) {}
    // Resumes from a state taken with state(). The all-zero state is xoshiro's one fixed point (it would
    // return 0 forever) and never comes out of seed_state(); the caller rejects it.
    explicit Rng(const StateWords& state) : s_(state) {}

    static StateWords seed_state(uint64_t seed);

    uint64_t next_u64();
    // Uniform in [0, 1): the top 24 bits of next_u64() times 2^-24, so every value is an exact float.
    float uniform_float();

    const StateWords& state() const { return s_; }

private:
    StateWords s_;
};

}  // namespace kvstash
