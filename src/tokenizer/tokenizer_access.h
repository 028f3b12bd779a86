// The library's own way to build a Tokenizer from a vocabulary and to read that vocabulary back (the
// public Tokenizer has neither: a Model builds it from its file). src/ and tests only.
#pragma once

#include <utility>

#include "kvstash/tokenizer.h"
#include "tokenizer/vocabulary.h"

namespace kvstash {

// Friend of Tokenizer (declared in kvstash/tokenizer.h).
struct TokenizerAccess {
    // Throws Error(unsupported) for an unknown vocab.model or (byte-level) vocab.pre, naming it and
    // listing the known ones; Error(invalid_argument) for an inconsistent vocabulary (empty, arrays of
    // the wrong length, a special id outside it).
    static Tokenizer make(Vocabulary vocab);
    static const Vocabulary& vocabulary(const Tokenizer& tokenizer);
};

inline Tokenizer make_tokenizer(Vocabulary vocab) { return TokenizerAccess::make(std::move(vocab)); }
inline const Vocabulary& tokenizer_vocabulary(const Tokenizer& tokenizer) {
    return TokenizerAccess::vocabulary(tokenizer);
}

}  // namespace kvstash
