// The one internal way into kvstash/grammar.h's pimpl classes: the parsed rules of a Grammar and the byte
// trie of a GrammarVocabulary, for the matcher (grammar_matcher.h), constrained sampling (engine/), tests
// and benchmarks. src/ only: never include from include/kvstash/.
#pragma once

#include <memory>
#include <string>

#include "grammar/gbnf_parse.h"
#include "grammar/grammar_matcher.h"
#include "kvstash/grammar.h"

namespace kvstash {

struct Grammar::Impl {
    std::string gbnf;
    std::shared_ptr<const grammar::ParsedGrammar> parsed;
    GrammarEnd end = GrammarEnd::nothing_may_follow;
};

struct GrammarVocabulary::Impl {
    std::shared_ptr<const grammar::TokenTrie> trie;
};

struct GrammarAccess {
    static std::shared_ptr<const Grammar> make(std::string gbnf, std::shared_ptr<const grammar::ParsedGrammar> parsed,
                                               GrammarEnd end = GrammarEnd::nothing_may_follow) {
        return std::shared_ptr<const Grammar>(
            new Grammar(std::make_unique<Grammar::Impl>(Grammar::Impl{std::move(gbnf), std::move(parsed), end})));
    }
    static const std::shared_ptr<const grammar::ParsedGrammar>& parsed(const Grammar& g) { return g.impl_->parsed; }

    static std::shared_ptr<const GrammarVocabulary> vocabulary(std::shared_ptr<const grammar::TokenTrie> trie) {
        return std::shared_ptr<const GrammarVocabulary>(
            new GrammarVocabulary(std::make_unique<GrammarVocabulary::Impl>(GrammarVocabulary::Impl{std::move(trie)})));
    }
    static const std::shared_ptr<const grammar::TokenTrie>& trie(const GrammarVocabulary& v) { return v.impl_->trie; }
};

}  // namespace kvstash
