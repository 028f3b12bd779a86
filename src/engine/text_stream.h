// The text side of generation, one token at a time: turns sampled tokens into text that is safe to
// show (complete UTF-8 characters only, never bytes that may still become the start of a stop string),
// cuts the text before a stop string and recognises end-of-generation tokens. generate() drives it in
// its loop; the HTTP server drives one per sequence, a step at a time, so both stream the same bytes.
//
//   TextStream stream(tokenizer, {"\n\n"}, StopAtEndOfGeneration::yes);
//   for each sampled token t:
//       if (auto stop = stream.push(t)) { show(stream.take_rest()); break; }
//       show(stream.take_ready());
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvstash/generate.h"
#include "kvstash/tokenizer.h"

namespace kvstash {

// Whether an end-of-generation token (Tokenizer::is_eog) stops the stream (its text never added) or is
// treated as any other token.
enum class StopAtEndOfGeneration { no, yes };

class TextStream {
public:
    // `tokenizer` must outlive the stream. Throws Error(invalid_argument) for an empty stop string.
    TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings, StopAtEndOfGeneration at_eog);

    // Adds a sampled token. Returns StopReason::end_of_generation for an EOG token (when stopping at
    // them; its text is never added) or StopReason::stop_string when a stop string is now complete (the
    // text is then cut before its first occurrence); nullopt otherwise.
    std::optional<StopReason> push(int32_t token);

    // The text that became ready since the last take (possibly empty).
    std::string_view take_ready();
    // Everything not yet taken, held-back bytes included (the end of generation resolves every
    // hold-back, an incomplete character at the very end included).
    std::string_view take_rest();

    const std::string& text() const { return text_; }
    std::string take_text() { return std::move(text_); }

private:
    // End of the text that can be shown now: before the earliest position from which the rest is a
    // proper prefix of a stop string, and not inside an incomplete UTF-8 character.
    size_t ready_end() const;

    const Tokenizer& tokenizer_;
    std::vector<std::string> stops_;
    StopAtEndOfGeneration at_eog_ = StopAtEndOfGeneration::yes;
    // Invariant: no stop string can begin before emitted_ (text that could be the start of one is
    // never emitted), so searches start there and look at a few bytes only.
    std::string text_;
    size_t emitted_ = 0;
};

}  // namespace kvstash
