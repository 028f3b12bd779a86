// The public wrappers of kvstash/grammar.h over the parser and matcher (GrammarVocabulary::build, which
// needs the tokenizer, is in grammar_vocabulary.cpp: this file links without it, e.g. in fuzz_request).
#include "kvstash/grammar.h"

#include <cmath>
#include <vector>

#include "grammar/gbnf_parse.h"
#include "grammar/grammar_matcher.h"

namespace kvstash {

Grammar::Grammar(std::string gbnf, std::shared_ptr<const grammar::ParsedGrammar> parsed, GrammarEnd end)
    : gbnf_(std::move(gbnf)), parsed_(std::move(parsed)), end_(end) {}

void GrammarLimits::check_deadline() const {
    if (deadline != std::chrono::steady_clock::time_point::max() && std::chrono::steady_clock::now() > deadline)
        throw PreparationExpired("preparing the request (its grammar or JSON Schema) ran past its deadline");
}

std::shared_ptr<const Grammar> Grammar::from_gbnf(std::string_view gbnf, const GrammarLimits& limits) {
    auto parsed = std::make_shared<const grammar::ParsedGrammar>(grammar::parse_gbnf(gbnf, limits));
    return std::make_shared<const Grammar>(std::string(gbnf), std::move(parsed));
}

GrammarVocabulary::GrammarVocabulary(std::shared_ptr<const grammar::TokenTrie> trie) : trie_(std::move(trie)) {}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const GrammarVocabulary> vocabulary)
    : matcher_(std::make_unique<grammar::GrammarMatcher>(grammar->parsed(), vocabulary->trie())),
      end_(grammar->end()) {}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const GrammarVocabulary> vocabulary, GrammarTrigger trigger)
    : matcher_(std::make_unique<grammar::GrammarMatcher>(grammar->parsed(), vocabulary->trie())),
      end_(grammar->end()),
      vocabulary_(std::move(vocabulary)),
      trigger_(std::move(trigger)),
      active_(trigger_.text.empty()) {}

GrammarTrigger tool_call_trigger(ToolCallFormat format) {
    switch (format) {
        case ToolCallFormat::qwen: return {"<tool_call>", false};
        case ToolCallFormat::llama3: return {"{\"name\"", true};
        case ToolCallFormat::none: break;
    }
    return {};
}

void GrammarConstraint::watch_for_trigger(int32_t token) {
    const grammar::TokenTrie& trie = *vocabulary_->trie();
    // Control tokens (<|im_end|>) stand for no text; ids past the vocabulary neither.
    if (token < 0 || token >= trie.n_vocab() || !trie.is_matchable(token) || trie.is_end_token(token)) return;
    pending_ += trie.piece(token);
    const std::string& t = trigger_.text;
    size_t start;
    if (trigger_.at_start) {
        start = pending_.find_first_not_of(" \t\r\n");
        if (start == std::string::npos) return;
        const std::string_view rest = std::string_view(pending_).substr(start);
        if (rest.size() < t.size()) {
            if (!std::string_view(t).starts_with(rest)) given_up_ = true;  // the output starts otherwise
            return;
        }
        if (!rest.starts_with(t)) {
            given_up_ = true;
            return;
        }
    } else {
        start = pending_.find(t);
        if (start == std::string::npos) {
            // Keep only what could be the start of a trigger split across tokens.
            if (pending_.size() >= t.size()) pending_.erase(0, pending_.size() - (t.size() - 1));
            return;
        }
    }
    if (matcher_->accept_bytes(std::string_view(pending_).substr(start))) {
        active_ = true;
    } else {
        given_up_ = true;  // text the grammar rejects (a malformed call): left as it is
    }
    pending_.clear();
}

GrammarConstraint::~GrammarConstraint() = default;
GrammarConstraint::GrammarConstraint(GrammarConstraint&&) noexcept = default;
GrammarConstraint& GrammarConstraint::operator=(GrammarConstraint&&) noexcept = default;

bool GrammarConstraint::mask(std::span<float> logits) {
    if (!active_) return true;  // lazy, before the trigger: the logits are not touched
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

bool GrammarConstraint::allows(int32_t token) { return !active_ || matcher_->is_allowed(token); }

bool GrammarConstraint::mask_is_cached() { return !active_ || matcher_->cached_mask() != nullptr; }

void GrammarConstraint::accept(int32_t token) {
    if (active_) {
        matcher_->accept_token(token);
    } else if (!given_up_) {
        watch_for_trigger(token);
    }
}

// A lazy constraint before its trigger takes any text (it constrains nothing yet).
bool GrammarConstraint::accept_text(std::string_view text) { return !active_ || matcher_->accept_bytes(text); }
bool GrammarConstraint::can_end() const { return !active_ || matcher_->can_end(); }
bool GrammarConstraint::must_end() const {
    if (!active_) return false;
    if (matcher_->must_end()) return true;
    return end_ == GrammarEnd::only_whitespace_may_follow && matcher_->only_whitespace_may_follow();
}

}  // namespace kvstash
