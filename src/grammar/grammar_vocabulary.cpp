// GrammarVocabulary::build (kvstash/grammar.h): a tokenizer's pieces, which tokens can match text, and
// the end-of-generation tokens, as the matcher's byte trie.
#include <string>
#include <vector>

#include "grammar/grammar_access.h"
#include "grammar/grammar_matcher.h"
#include "kvstash/grammar.h"
#include "kvstash/tokenizer.h"
#include "tokenizer/tokenizer_access.h"

namespace kvstash {

std::shared_ptr<const GrammarVocabulary> GrammarVocabulary::build(const Tokenizer& tokenizer) {
    const Vocabulary& vocab = tokenizer_vocabulary(tokenizer);
    const int32_t n = tokenizer.n_vocab();
    std::vector<std::string> pieces(static_cast<size_t>(n));
    std::vector<uint8_t> matchable(static_cast<size_t>(n), 1);
    std::vector<int32_t> end_tokens;
    for (int32_t id = 0; id < n; ++id) {
        pieces[static_cast<size_t>(id)] = tokenizer.token_piece(id);
        if (!vocab.token_types.empty()) {
            const auto type = static_cast<TokenType>(vocab.token_types[static_cast<size_t>(id)]);
            // Control tokens (<|im_start|>) stand for no text; unknown and unused ones never should be sampled.
            if (type == TokenType::control || type == TokenType::unknown || type == TokenType::unused) {
                matchable[static_cast<size_t>(id)] = 0;
            }
        }
        if (tokenizer.is_eog(id)) end_tokens.push_back(id);
    }
    return GrammarAccess::vocabulary(
        std::make_shared<const grammar::TokenTrie>(std::move(pieces), matchable, std::move(end_tokens)));
}

}  // namespace kvstash
