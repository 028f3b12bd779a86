// What a State holds. The evaluator writes into it; later the state file reads and writes it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kvstash/model.h"
#include "kv/kv_cache.h"

namespace kvstash {

struct State::Impl {
    const Model* model = nullptr;
    int64_t n_ctx = 0;
    std::vector<int32_t> tokens;
    KvCache kv;
    std::vector<float> last_logits;  // (n_vocab) or empty
    std::optional<SamplerState> sampler;
    // False when the KV is not what evaluating the tokens computes (decoded from a lossy q8_0 state file,
    // or continued from such KV): the prefix cache, whose blocks must be exact, never takes it.
    bool kv_exact = true;
};

}  // namespace kvstash
