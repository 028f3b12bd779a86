#include "kvstash/log_softmax.h"

#include <algorithm>
#include <cmath>

namespace kvstash {

double log_sum_exp(std::span<const float> logits) {
    double max_logit = -INFINITY;
    for (float l : logits) max_logit = std::max(max_logit, static_cast<double>(l));
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
    return max_logit + std::log(sum);
}

double log_softmax_at(std::span<const float> logits, size_t index) {
    return static_cast<double>(logits[index]) - log_sum_exp(logits);
}

}  // namespace kvstash
