// make_model_drafter of speculative.h: greedy guesses of a draft model that follows the target's sequence
// in its own State.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/speculative.h"
#include "kvstash/state.h"

namespace kvstash {

namespace {

class ModelDrafter final : public Drafter {
public:
    ModelDrafter(std::shared_ptr<const Model> model, const ModelDrafterOptions& options)
        : evaluator_(model, options.n_threads),
          state_(*model, StateOptions{.n_ctx = options.n_ctx}),
          p_min_(options.p_min),
          model_(std::move(model)) {}

    void propose(std::span<const int32_t> context, int32_t max_tokens, std::vector<int32_t>& draft) override {
        if (static_cast<int64_t>(context.size()) + max_tokens > state_.n_ctx()) return;  // nothing fits
        follow(context);
        for (int32_t i = 0; i < max_tokens; ++i) {
            const auto [token, probability] = most_likely(state_.last_logits());
            if (probability < p_min_) return;
            draft.push_back(token);
            if (i + 1 < max_tokens) evaluator_.eval(state_, std::span<const int32_t>(&token, 1));
        }
    }

    const char* name() const override { return "draft"; }

private:
    // Brings the draft state to `context` with its last position's logits: cut back to the common prefix
    // (last round's rejected guesses go), then evaluate the rest, at least the last token.
    void follow(std::span<const int32_t> context) {
        const auto held = state_.tokens();
        const auto common = static_cast<int64_t>(
            std::mismatch(held.begin(), held.end(), context.begin(), context.end()).first - held.begin());
        const int64_t keep = std::min<int64_t>(common, static_cast<int64_t>(context.size()) - 1);
        if (keep < state_.n_tokens()) state_.truncate(keep);
        evaluator_.eval(state_, context.subspan(static_cast<size_t>(keep)));
    }

    // The argmax (lowest id on ties) and its softmax probability (needed only with p_min).
    std::pair<int32_t, float> most_likely(std::span<const float> logits) const {
        const auto best = std::max_element(logits.begin(), logits.end());
        if (p_min_ <= 0.0f) return {static_cast<int32_t>(best - logits.begin()), 1.0f};
        double sum = 0.0;
        for (const float l : logits) sum += std::exp(static_cast<double>(l) - *best);
        return {static_cast<int32_t>(best - logits.begin()), static_cast<float>(1.0 / sum)};
    }

    Evaluator evaluator_;
    State state_;
    float p_min_;
    std::shared_ptr<const Model> model_;  // keeps the draft model alive for state_
};

}  // namespace

std::unique_ptr<Drafter> make_model_drafter(std::shared_ptr<const Model> draft_model, const Model& target,
                                            const ModelDrafterOptions& options) {
    if (!draft_model) throw Error(ErrorCode::invalid_argument, "the draft model is null");
    if (draft_model->info().n_vocab != target.info().n_vocab) {
        throw Error(ErrorCode::invalid_argument,
                    "the draft model's vocabulary has " + std::to_string(draft_model->info().n_vocab) +
                        " tokens, the target's " + std::to_string(target.info().n_vocab) +
                        ": a draft model must share the target's vocabulary (pick one of the same family)");
    }
    if (!(options.p_min >= 0.0f && options.p_min <= 1.0f)) {
        throw Error(ErrorCode::invalid_argument,
                    "the draft p_min must lie in [0, 1], got " + std::to_string(options.p_min));
    }
    return std::make_unique<ModelDrafter>(std::move(draft_model), options);
}

}  // namespace kvstash
