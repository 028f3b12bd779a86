// sample_constrained of constrained_sample.h.
#include "engine/constrained_sample.h"

namespace kvstash {

std::optional<int32_t> sample_constrained(Sampler& sampler, GrammarConstraint& constraint,
                                          std::span<const float> logits, std::span<const int32_t> history,
                                          std::vector<float>& masked) {
    if (!constraint.active()) return sampler.sample(logits, history);  // a lazy constraint before its trigger
    // A cached mask costs a copy: cheaper than asking tokens one by one when few are allowed (an enum, a
    // digit), where the lazy walk would ask many and then fall back anyway.
    if (!constraint.mask_is_cached()) {
        const auto token = sampler.sample_allowed(
            logits, history, [&constraint](int32_t id) { return constraint.allows(id); }, kConstrainedMaxAsked);
        if (token) return token;
    }
    masked.assign(logits.begin(), logits.end());
    if (!constraint.mask(masked)) return std::nullopt;
    return sampler.sample(masked, history);
}

}  // namespace kvstash
