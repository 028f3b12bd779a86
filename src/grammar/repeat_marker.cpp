// Counted-repetition markers (grammar_mask.cpp): an ASCII byte that every copy of a repetition's item
// holds, so that a token holding it few times cannot span enough copies for the count to matter
// (`("- " [^\n]{1,60} "\n"){1,8}`: a token without "\n" is allowed alike whatever the number of lines
// left). Found from the item's literal characters; the vocabulary trie counts the byte per subtree.
#include <algorithm>

#include "grammar/grammar_matcher.h"

namespace kvstash::grammar {

namespace {

constexpr int kMaxDepth = 4;  // rule references followed into when looking for an item's literal characters

bool ends_alternative(const Element& e) { return e.type == ElementType::end || e.type == ElementType::alt; }

bool single_alternative(const ParsedGrammar& g, int32_t rule) {
    for (auto pos = static_cast<size_t>(g.rule_start[static_cast<size_t>(rule)]);; ++pos) {
        if (g.elements[pos].type == ElementType::alt) return false;
        if (g.elements[pos].type == ElementType::end) return true;
    }
}

// Adds to `counts` how many times each ASCII character is a one-character class in the sequence from
// `pos` to its alternative's end, following references to rules of a single alternative: every string
// the sequence matches holds each such character at least that many times.
void count_literals(const ParsedGrammar& g, int32_t pos, int depth, std::array<int32_t, 128>& counts) {
    const auto& elements = g.elements;
    while (!ends_alternative(elements[static_cast<size_t>(pos)])) {
        const Element& e = elements[static_cast<size_t>(pos)];
        if (e.type == ElementType::rule_ref) {
            const auto rule = static_cast<int32_t>(e.value);
            if (depth < kMaxDepth && single_alternative(g, rule))
                count_literals(g, g.rule_start[static_cast<size_t>(rule)], depth + 1, counts);
            ++pos;
            continue;
        }
        const int32_t end = class_end(elements, pos);
        if (e.type == ElementType::chr && e.value < 128 && end == pos + 1) ++counts[e.value];
        pos = end;
    }
}

}  // namespace

void TokenTrie::count_ascii_bytes(const std::vector<int32_t>& ids) {
    tokens_containing_.fill(0);
    for (const int32_t id : ids) {
        std::array<bool, 128> seen{};
        for (const char c : pieces_[static_cast<size_t>(id)]) {
            const auto b = static_cast<uint8_t>(c);
            if (b < 128 && !seen[b]) {
                seen[b] = true;
                ++tokens_containing_[b];
            }
        }
    }
}

const std::vector<uint8_t>& TokenTrie::marker_counts(uint8_t b) const {
    b &= 0x7F;
    const std::lock_guard lock(marker_mutex_);
    if (marker_counts_[b]) return *marker_counts_[b];
    // Nodes are numbered depth first, parents before children: prefix counts forward, subtree maxima back.
    std::vector<int32_t> prefix(nodes.size(), 0), most(nodes.size(), -1);
    for (size_t n = 0; n < nodes.size(); ++n) {
        for (int32_t c = nodes[n].first_child; c < nodes[n].first_child + nodes[n].n_children; ++c) {
            prefix[static_cast<size_t>(child_node[static_cast<size_t>(c)])] =
                prefix[n] + (child_byte[static_cast<size_t>(c)] == b ? 1 : 0);
        }
    }
    auto counts = std::make_unique<std::vector<uint8_t>>(nodes.size(), 0);
    for (size_t n = nodes.size(); n-- > 0;) {
        if (nodes[n].n_tokens > 0) most[n] = prefix[n];
        for (int32_t c = nodes[n].first_child; c < nodes[n].first_child + nodes[n].n_children; ++c)
            most[n] = std::max(most[n], most[static_cast<size_t>(child_node[static_cast<size_t>(c)])]);
        (*counts)[n] = static_cast<uint8_t>(std::clamp(most[n], 0, 255));
    }
    marker_counts_[b] = std::move(counts);
    return *marker_counts_[b];
}

// Per chain: the literal character of the item (R_1's first alternative) that the fewest vocabulary
// tokens hold, per time the item holds it.
void GrammarMatcher::set_chain_markers() {
    for (const auto& chain : grammar_->repeat_chains) {
        std::array<int32_t, 128> counts{};
        count_literals(*grammar_, grammar_->rule_start[static_cast<size_t>(chain.front())], 0, counts);
        int32_t best = -1;
        for (int32_t m = 0; m < 128; ++m) {
            if (counts[m] == 0) continue;
            const auto cost = static_cast<int64_t>(trie_->tokens_containing(static_cast<uint8_t>(m)));
            if (best < 0 || cost * counts[best] <
                                static_cast<int64_t>(trie_->tokens_containing(static_cast<uint8_t>(best))) * counts[m])
                best = m;
        }
        chain_marker_.push_back(best);
        chain_marker_min_.push_back(best < 0 ? 0 : counts[best]);
        chain_marker_counts_.push_back(best < 0 ? nullptr : &trie_->marker_counts(static_cast<uint8_t>(best)));
    }
}

}  // namespace kvstash::grammar
