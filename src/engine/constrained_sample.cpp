// sample_constrained of constrained_sample.h.
#include "engine/constrained_sample.h"

namespace kvstash {

std::optional<int32_t> sample_constrained(Sampler& sampler, GrammarConstraint& constraint,
                                          std::span<const float> logits, std::span<const int32_t> history,
                                          std::vector<float>& masked) {
    if (!constraint.active()) return sampler.sample(logits, history);  // a lazy constraint before its trigger
    if (const auto token =
            sampler.sample_allowed(logits, history, [&constraint](int32_t id) { return constraint.allows(id); })) {
        return token;
    }
    masked.assign(logits.begin(), logits.end());
    if (!constraint.mask(masked)) return std::nullopt;
    return sampler.sample(masked, history);
}

}  // namespace kvstash
