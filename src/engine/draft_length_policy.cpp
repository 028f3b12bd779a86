// The draft length from round to round (kvstash/speculative.h): next_draft_length's adaptive length and the
// acceptance-keyed pause of DraftLengthPolicy.
#include <algorithm>

#include "kvstash/speculative.h"

namespace kvstash {

int32_t next_draft_length(const SpeculationOptions& options, int32_t current, size_t drafted, size_t accepted) {
    if (accepted == drafted) return std::min(options.max_draft, current * 2);
    return std::min(options.max_draft, std::max<int32_t>(1, static_cast<int32_t>(accepted) + 1));
}

DraftLengthPolicy::DraftLengthPolicy(const SpeculationOptions& options, bool shadow_checks)
    : options_(options), shadow_checks_(shadow_checks), length_(std::min(options.max_draft, kFirstDraftLength)) {}

int32_t DraftLengthPolicy::round_length() {
    if (!paused_) return length_;
    if (shadow_checks_) return 0;  // shadow guesses instead of probes
    // A probe, once due, stays due until a round has verified guesses (verified() restarts the count).
    if (rounds_paused_ < probe_interval_) ++rounds_paused_;
    return rounds_paused_ < probe_interval_ ? 0 : length_;
}

void DraftLengthPolicy::verified(size_t drafted, size_t accepted) {
    if (drafted == 0) return;
    const double rate = static_cast<double>(accepted) / static_cast<double>(drafted);
    length_ = next_draft_length(options_, length_, drafted, accepted);
    if (paused_) {  // a probe
        rounds_paused_ = 0;
        if (rate >= kResumeFrom) {
            paused_ = false;
            acceptance_ = rate;
            probe_interval_ = kFirstProbeInterval;
        } else {
            probe_interval_ = std::min(kLastProbeInterval, 2 * probe_interval_);
        }
        return;
    }
    update_acceptance(rate);
}

void DraftLengthPolicy::shadow_checked(bool right) {
    if (!paused_ || !right) return;
    // Resumed at the resume rate: a first verified round that keeps nothing pauses again.
    paused_ = false;
    acceptance_ = kResumeFrom;
}

void DraftLengthPolicy::update_acceptance(double rate) {
    acceptance_ = (1.0 - kAcceptanceWeight) * acceptance_ + kAcceptanceWeight * rate;
    if (acceptance_ < kPauseBelow) {
        paused_ = true;
        rounds_paused_ = 0;
        probe_interval_ = kFirstProbeInterval;
    }
}

}  // namespace kvstash
