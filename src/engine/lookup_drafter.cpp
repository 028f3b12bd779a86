// make_lookup_drafter of speculative.h: prompt lookup (n-gram match against the sequence's own tokens).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/speculative.h"

namespace kvstash {

namespace {

class LookupDrafter final : public Drafter {
public:
    explicit LookupDrafter(const LookupDrafterOptions& options) : options_(options) {}

    // The longest suffix of `context` (max_ngram down to min_ngram tokens) that occurred before, at its latest
    // earlier occurrence: the tokens that followed it there. O(context × ngram) per call: about 10 µs per
    // thousand tokens, against milliseconds for a decode step.
    void propose(std::span<const int32_t> context, int32_t max_tokens, std::vector<int32_t>& draft) override {
        const auto size = static_cast<int64_t>(context.size());
        for (int64_t n = std::min<int64_t>(options_.max_ngram, size - 1); n >= options_.min_ngram; --n) {
            const auto suffix = context.subspan(static_cast<size_t>(size - n));
            // Occurrences start at j <= size - n - 1 (not the suffix itself); the latest first.
            for (int64_t j = size - n - 1; j >= 0; --j) {
                if (!std::equal(suffix.begin(), suffix.end(), context.begin() + j)) continue;
                const int64_t from = j + n;
                const int64_t count = std::min<int64_t>(max_tokens, size - from);
                draft.insert(draft.end(), context.begin() + from, context.begin() + from + count);
                return;
            }
        }
    }

    const char* name() const override { return "lookup"; }
    bool costs_nothing() const override { return true; }  // a scan of the tokens

private:
    LookupDrafterOptions options_;
};

}  // namespace

std::unique_ptr<Drafter> make_lookup_drafter(const LookupDrafterOptions& options) {
    if (options.min_ngram < 1 || options.max_ngram < options.min_ngram) {
        throw Error(ErrorCode::invalid_argument, "prompt lookup needs 1 <= min_ngram <= max_ngram, got " +
                                                     std::to_string(options.min_ngram) + " and " +
                                                     std::to_string(options.max_ngram));
    }
    return std::make_unique<LookupDrafter>(options);
}

}  // namespace kvstash
