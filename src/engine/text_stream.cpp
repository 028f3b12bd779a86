#include "engine/text_stream.h"

#include <algorithm>

#include "base/utf8.h"
#include "kvstash/error.h"

namespace kvstash {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings, StopAtEndOfGeneration at_eog)
    : tokenizer_(tokenizer), stops_(std::move(stop_strings)), at_eog_(at_eog) {
    for (const std::string& stop : stops_) {
        if (stop.empty()) {
            throw Error(ErrorCode::invalid_argument,
                        "a stop string is empty (it would match before any text); remove it");
        }
    }
}

std::optional<StopReason> TextStream::push(int32_t token) {
    if (tokenizer_.is_eog(token)) {
        // An EOG token's text is never shown, also when generation goes on past it.
        if (at_eog_ == StopAtEndOfGeneration::yes) return StopReason::end_of_generation;
        return std::nullopt;
    }
    text_ += tokenizer_.token_piece(token);
    size_t first = std::string::npos;
    for (const std::string& stop : stops_) first = std::min(first, text_.find(stop, emitted_));
    if (first == std::string::npos) return std::nullopt;
    text_.resize(first);
    return StopReason::stop_string;
}

std::string_view TextStream::take_ready() {
    const size_t end = ready_end();
    if (end <= emitted_) return {};
    const std::string_view piece(text_.data() + emitted_, end - emitted_);
    emitted_ = end;
    return piece;
}

std::string_view TextStream::take_rest() {
    if (emitted_ >= text_.size()) return {};
    const std::string_view piece(text_.data() + emitted_, text_.size() - emitted_);
    emitted_ = text_.size();
    return piece;
}

size_t TextStream::ready_end() const {
    size_t hold = text_.size();
    for (size_t i = emitted_; i < text_.size() && hold == text_.size(); ++i) {
        const size_t rest = text_.size() - i;
        for (const std::string& stop : stops_) {
            if (rest < stop.size() && stop.compare(0, rest, text_, i, rest) == 0) {
                hold = i;
                break;
            }
        }
    }
    const size_t end = hold - utf8::incomplete_tail_length(std::string_view(text_).substr(0, hold));
    return std::max(end, emitted_);
}

}  // namespace kvstash
