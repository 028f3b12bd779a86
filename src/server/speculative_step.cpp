#include "server/speculative_step.h"

#include <algorithm>
#include <span>
#include <vector>

#include "state/state_access.h"

namespace kvstash::server {

void prepare_decode(Sequence& seq) {
    seq.step_tokens.assign(1, *seq.next_token);
    seq.shadow_guess.reset();
    if (!seq.drafter) return;
    const GenerationJob& job = *seq.job->job;
    const int64_t verified = seq.state.n_tokens() + 1;  // with next_token
    const int32_t length = seq.draft_policy.round_length();
    // Paused with a drafter that costs nothing: one guess, checked against the next token, never verified.
    const bool shadow = length == 0 && seq.draft_policy.wants_shadow_guess();
    // seq.generated counts next_token already; k guesses give at most k more samples before the limit.
    const int64_t want =
        std::min<int64_t>({shadow ? 1 : length, job.max_tokens - seq.generated, seq.state.n_ctx() - verified});
    if (want < 1 || (!shadow && want < seq.speculation.min_draft)) return;
    std::vector<int32_t> context(seq.state.tokens().begin(), seq.state.tokens().end());
    context.push_back(*seq.next_token);
    std::vector<int32_t> draft;
    seq.drafter->propose(context, static_cast<int32_t>(want), draft);
    if (shadow) {
        if (!draft.empty()) seq.shadow_guess = draft.front();
        return;
    }
    if (static_cast<int64_t>(draft.size()) > want) draft.resize(static_cast<size_t>(want));
    if (static_cast<int64_t>(draft.size()) < seq.speculation.min_draft) return;
    seq.step_tokens.insert(seq.step_tokens.end(), draft.begin(), draft.end());
    // Sliding-window layers: trimmed as after next_token alone until finish_decode has cut the rejected guesses.
    StateAccess::hold_trim_for_guesses(seq.state, verified);
}

DecodeCount finish_decode(Sequence& seq) {
    DecodeCount count;
    const size_t n_guesses = seq.step_tokens.size() - 1;
    if (n_guesses == 0) {
        sample_step(seq);
        count.sampled = 1;
        if (seq.shadow_guess && seq.next_token) seq.draft_policy.shadow_checked(*seq.shadow_guess == *seq.next_token);
        return count;
    }
    count.drafted = static_cast<int64_t>(n_guesses);
    const size_t n_vocab = seq.step_logits.size() / seq.step_tokens.size();
    // The state holds the decided tokens, next_token, then the guesses: decided = everything up to a row.
    auto verified = static_cast<size_t>(seq.state.n_tokens()) - n_guesses;
    size_t accepted = 0;
    for (size_t row = 0; row <= n_guesses; ++row) {
        const auto logits = std::span<const float>(seq.step_logits).subspan(row * n_vocab, n_vocab);
        sample_step(seq, logits, seq.state.tokens().first(verified));
        ++count.sampled;
        if (seq.finished || row == n_guesses || *seq.next_token != seq.step_tokens[row + 1]) break;
        ++accepted;  // the guess is this sample: already evaluated, so no token is pending
        ++verified;
        seq.next_token.reset();
    }
    // The guesses past the decided tokens go (a finished sequence's state goes to the prefix cache).
    if (static_cast<size_t>(seq.state.n_tokens()) > verified) seq.state.truncate(static_cast<int64_t>(verified));
    StateAccess::settle_guesses(seq.state);
    count.accepted = static_cast<int64_t>(accepted);
    seq.draft_policy.verified(n_guesses, accepted);
    return count;
}

}  // namespace kvstash::server
