// The public wrappers of kvstash/grammar.h over the parser and matcher (GrammarVocabulary::build, which
// needs the tokenizer, is in grammar_vocabulary.cpp: this file links without it, e.g. in fuzz_request).
#include "kvstash/grammar.h"

#include <cmath>
#include <vector>

#include "grammar/gbnf_parse.h"
#include "grammar/grammar_access.h"
#include "grammar/grammar_matcher.h"

namespace kvstash {

Grammar::Grammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Grammar::~Grammar() = default;
const std::string& Grammar::gbnf() const { return impl_->gbnf; }
GrammarEnd Grammar::end() const { return impl_->end; }

void GrammarLimits::check_deadline() const {
    if (deadline != std::chrono::steady_clock::time_point::max() && std::chrono::steady_clock::now() > deadline)
        throw PreparationExpired("preparing the request (its grammar or JSON Schema) ran past its deadline");
}

std::shared_ptr<const Grammar> Grammar::from_gbnf(std::string_view gbnf, const GrammarLimits& limits) {
    auto parsed = std::make_shared<const grammar::ParsedGrammar>(grammar::parse_gbnf(gbnf, limits));
    return GrammarAccess::make(std::string(gbnf), std::move(parsed));
}

GrammarVocabulary::GrammarVocabulary(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrammarVocabulary::~GrammarVocabulary() = default;

struct GrammarConstraint::Impl {
    Impl(const Grammar& grammar, std::shared_ptr<const GrammarVocabulary> vocab, GrammarTrigger trig)
        : matcher(GrammarAccess::parsed(grammar), GrammarAccess::trie(*vocab)),
          end(grammar.end()),
          vocabulary(std::move(vocab)),
          trigger(std::move(trig)),
          active(trigger.text.empty()) {}

    void watch_for_trigger(int32_t token);

    grammar::GrammarMatcher matcher;
    GrammarEnd end = GrammarEnd::nothing_may_follow;
    std::shared_ptr<const GrammarVocabulary> vocabulary;
    GrammarTrigger trigger;
    bool active = true;
    bool given_up = false;
    std::string pending;  // lazy: the text so far (at_start), or its last trigger.size() - 1 bytes
};

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const GrammarVocabulary> vocabulary)
    : impl_(std::make_unique<Impl>(*grammar, std::move(vocabulary), GrammarTrigger{})) {}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const GrammarVocabulary> vocabulary, GrammarTrigger trigger)
    : impl_(std::make_unique<Impl>(*grammar, std::move(vocabulary), std::move(trigger))) {}

GrammarTrigger tool_call_trigger(ToolCallFormat format) {
    switch (format) {
        case ToolCallFormat::qwen: return {"<tool_call>", false};
        case ToolCallFormat::llama3: return {"{\"name\"", true};
        case ToolCallFormat::none: break;
    }
    return {};
}

void GrammarConstraint::Impl::watch_for_trigger(int32_t token) {
    const grammar::TokenTrie& trie = *GrammarAccess::trie(*vocabulary);
    // Control tokens (<|im_end|>) stand for no text; ids past the vocabulary neither.
    if (token < 0 || token >= trie.n_vocab() || !trie.is_matchable(token) || trie.is_end_token(token)) return;
    pending += trie.piece(token);
    const std::string& t = trigger.text;
    size_t start;
    if (trigger.at_start) {
        start = pending.find_first_not_of(" \t\r\n");
        if (start == std::string::npos) return;
        const std::string_view rest = std::string_view(pending).substr(start);
        if (rest.size() < t.size()) {
            if (!std::string_view(t).starts_with(rest)) given_up = true;  // the output starts otherwise
            return;
        }
        if (!rest.starts_with(t)) {
            given_up = true;
            return;
        }
    } else {
        start = pending.find(t);
        if (start == std::string::npos) {
            // Keep only what could be the start of a trigger split across tokens.
            if (pending.size() >= t.size()) pending.erase(0, pending.size() - (t.size() - 1));
            return;
        }
    }
    if (matcher.accept_bytes(std::string_view(pending).substr(start))) {
        active = true;
    } else {
        given_up = true;  // text the grammar rejects (a malformed call): left as it is
    }
    pending.clear();
}

GrammarConstraint::~GrammarConstraint() = default;
GrammarConstraint::GrammarConstraint(GrammarConstraint&&) noexcept = default;
GrammarConstraint& GrammarConstraint::operator=(GrammarConstraint&&) noexcept = default;

bool GrammarConstraint::mask(std::span<float> logits) {
    if (!impl_->active) return true;  // lazy, before the trigger: the logits are not touched
    const std::vector<uint64_t>& allowed = impl_->matcher.allowed_tokens();
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

bool GrammarConstraint::allows(int32_t token) { return !impl_->active || impl_->matcher.is_allowed(token); }

bool GrammarConstraint::mask_is_cached() { return !impl_->active || impl_->matcher.cached_mask() != nullptr; }

void GrammarConstraint::accept(int32_t token) {
    if (impl_->active) {
        impl_->matcher.accept_token(token);
    } else if (!impl_->given_up) {
        impl_->watch_for_trigger(token);
    }
}

// A lazy constraint before its trigger takes any text (it constrains nothing yet).
bool GrammarConstraint::accept_text(std::string_view text) {
    return !impl_->active || impl_->matcher.accept_bytes(text);
}
bool GrammarConstraint::can_end() const { return !impl_->active || impl_->matcher.can_end(); }
bool GrammarConstraint::must_end() const {
    if (!impl_->active) return false;
    if (impl_->matcher.must_end()) return true;
    return impl_->end == GrammarEnd::only_whitespace_may_follow && impl_->matcher.only_whitespace_may_follow();
}

bool GrammarConstraint::active() const { return impl_->active; }

}  // namespace kvstash
