#include "engine/rng.h"

namespace kvstash {

namespace {
constexpr uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::StateWords Rng::seed_state(uint64_t seed) {
    // splitmix64 (prng.di.unimi.it/splitmix64.c): a bijection of its counter, so four consecutive
    // outputs are distinct and never all zero.
    StateWords s{};
    uint64_t x = seed;
    for (uint64_t& word : s) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        word = z ^ (z >> 31);
    }
    return s;
}

uint64_t Rng::next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

float Rng::uniform_float() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }

}  // namespace kvstash
