// The public wrappers of kvstash/grammar.h over the parser and matcher (GrammarVocabulary::build, which
// needs the tokenizer, is in grammar_vocabulary.cpp: this file links without it, e.g. in fuzz_request).
#include "kvstash/grammar.h"

#include <cmath>
#include <vector>

#include "grammar/gbnf_parse.h"
#include "grammar/grammar_matcher.h"

namespace kvstash {

Grammar::Grammar(std::string gbnf, std::shared_ptr<const grammar::ParsedGrammar> parsed)
    : gbnf_(std::move(gbnf)), parsed_(std::move(parsed)) {}

std::shared_ptr<const Grammar> Grammar::from_gbnf(std::string_view gbnf) {
    auto parsed = std::make_shared<const grammar::ParsedGrammar>(grammar::parse_gbnf(gbnf));
    return std::make_shared<const Grammar>(std::string(gbnf), std::move(parsed));
}

GrammarVocabulary::GrammarVocabulary(std::shared_ptr<const grammar::TokenTrie> trie) : trie_(std::move(trie)) {}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const GrammarVocabulary> vocabulary)
    : matcher_(std::make_unique<grammar::GrammarMatcher>(grammar->parsed(), vocabulary->trie())) {}

GrammarConstraint::~GrammarConstraint() = default;
GrammarConstraint::GrammarConstraint(GrammarConstraint&&) noexcept = default;
GrammarConstraint& GrammarConstraint::operator=(GrammarConstraint&&) noexcept = default;

bool GrammarConstraint::mask(std::span<float> logits) {
    const std::vector<uint64_t>& allowed = matcher_->allowed_tokens();
    const size_t n_allowed = allowed.size() * 64;
    bool any = false;
    for (size_t i = 0; i < logits.size(); ++i) {
        if (i >= n_allowed || !((allowed[i / 64] >> (i % 64)) & 1)) {
            logits[i] = -INFINITY;
        } else {
            any = true;
        }
    }
    return any;
}

bool GrammarConstraint::allows(int32_t token) { return matcher_->is_allowed(token); }
void GrammarConstraint::accept(int32_t token) { matcher_->accept_token(token); }
bool GrammarConstraint::accept_text(std::string_view text) { return matcher_->accept_bytes(text); }
bool GrammarConstraint::can_end() const { return matcher_->can_end(); }
bool GrammarConstraint::must_end() const { return matcher_->must_end(); }

}  // namespace kvstash
