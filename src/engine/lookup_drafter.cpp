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

    // The longest suffix of `context` (up to max_ngram tokens, at least min_ngram) that occurred before, at its
    // latest earlier occurrence: the tokens that followed it there. An occurrence may overlap the suffix (the
    // context repeats with a period shorter than the suffix); what followed it is then copied on past the end
    // of the context from the guesses themselves (LZ77's overlapping copy), so that a repetition is proposed
    // max_tokens long, not only as far as the context reaches. One pass over the context, about one comparison
    // per token where the last token does not repeat: microseconds per thousand tokens, against milliseconds
    // for a decode step.
    void propose(std::span<const int32_t> context, int32_t max_tokens, std::vector<int32_t>& draft) override {
        const auto size = static_cast<int64_t>(context.size());
        if (size < 2 || max_tokens < 1) return;
        const int64_t longest = std::min<int64_t>(options_.max_ngram, size - 1);
        const int32_t last = context[static_cast<size_t>(size - 1)];
        int64_t best_end = 0;  // the occurrence ends just before this position (0: none)
        int64_t best_length = 0;
        // Occurrences end at e <= size - 1 (not the suffix itself), the latest first; a longer one wins.
        for (int64_t e = size - 1; e >= 1 && best_length < longest; --e) {
            if (context[static_cast<size_t>(e - 1)] != last) continue;
            int64_t length = 1;
            while (length < longest && length < e &&
                   context[static_cast<size_t>(e - 1 - length)] == context[static_cast<size_t>(size - 1 - length)]) {
                ++length;
            }
            if (length > best_length) {
                best_length = length;
                best_end = e;
            }
        }
        if (best_length < options_.min_ngram) return;
        const size_t first = draft.size();
        for (int64_t from = best_end; from < best_end + max_tokens; ++from) {
            const int32_t token =
                from < size ? context[static_cast<size_t>(from)] : draft[first + static_cast<size_t>(from - size)];
            draft.push_back(token);
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
