// The stack-set matcher and the trie walk of grammar_matcher.h.
#include "grammar/grammar_matcher.h"

#include <algorithm>
#include <deque>
#include <numeric>

#include "grammar/mask_cache.h"
#include "kvstash/error.h"

namespace kvstash::grammar {

namespace {

// Past these sizes the caches are dropped and rebuilt from the current stacks (memory per matcher stays
// below ~50 MB: a set costs its stacks plus a 512-byte ASCII transition row).
constexpr size_t kMaxNodes = size_t{1} << 20;  // stack nodes
constexpr size_t kMaxSets = size_t{1} << 16;   // interned stack sets

bool ends_alternative(const Element& e) { return e.type == ElementType::end || e.type == ElementType::alt; }

uint64_t key(int32_t a, uint32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | b; }

}  // namespace

TokenTrie::TokenTrie(std::vector<std::string> pieces, const std::vector<uint8_t>& matchable,
                     std::vector<int32_t> end_tokens)
    : pieces_(std::move(pieces)),
      matchable_(matchable),
      is_end_(pieces_.size(), 0),
      end_tokens_(std::move(end_tokens)) {
    matchable_.resize(pieces_.size(), 1);
    for (const int32_t id : end_tokens_) {
        if (id >= 0 && static_cast<size_t>(id) < pieces_.size()) is_end_[static_cast<size_t>(id)] = 1;
    }
    std::vector<int32_t> order;
    for (size_t i = 0; i < pieces_.size(); ++i) {
        if (matchable_[i] && !is_end_[i] && !pieces_[i].empty()) order.push_back(static_cast<int32_t>(i));
    }
    std::stable_sort(order.begin(), order.end(), [this](int32_t a, int32_t b) { return pieces_[a] < pieces_[b]; });
    build(order, 0, order.size(), 0);
    count_ascii_bytes(order);
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t x) { h = (h ^ x) * 1099511628211ull; };
    for (size_t i = 0; i < pieces_.size(); ++i) {
        for (const char c : pieces_[i]) mix(static_cast<uint8_t>(c));
        mix(0x100u | (static_cast<uint64_t>(matchable_[i]) << 9) | (static_cast<uint64_t>(is_end_[i]) << 10));
    }
    fingerprint_ = h;
}

int32_t TokenTrie::build(const std::vector<int32_t>& order, size_t lo, size_t hi, size_t depth) {
    const auto index = static_cast<int32_t>(nodes.size());
    nodes.emplace_back();
    below_bytes.emplace_back();
    below_non_ascii.push_back(0);
    nodes[index].first_token = static_cast<int32_t>(tokens.size());
    while (lo < hi && pieces_[order[lo]].size() == depth) tokens.push_back(order[lo++]);
    nodes[index].n_tokens = static_cast<int32_t>(tokens.size()) - nodes[index].first_token;
    // Children: runs of equal byte at `depth` (the range is sorted).
    std::vector<size_t> run_starts;
    for (size_t i = lo; i < hi; ++i) {
        if (i == lo || pieces_[order[i]][depth] != pieces_[order[i - 1]][depth]) run_starts.push_back(i);
    }
    const auto first_child = static_cast<int32_t>(child_byte.size());
    nodes[index].first_child = first_child;
    nodes[index].n_children = static_cast<int32_t>(run_starts.size());
    child_byte.resize(child_byte.size() + run_starts.size());
    child_node.resize(child_node.size() + run_starts.size());
    for (size_t r = 0; r < run_starts.size(); ++r) {
        const size_t end = r + 1 < run_starts.size() ? run_starts[r + 1] : hi;
        child_byte[first_child + r] = static_cast<uint8_t>(pieces_[order[run_starts[r]]][depth]);
        const int32_t child = build(order, run_starts[r], end, depth + 1);
        child_node[first_child + r] = child;
        const uint8_t byte = child_byte[first_child + r];
        const auto i = static_cast<size_t>(index), c = static_cast<size_t>(child);
        if (byte >= 0x80) {
            below_non_ascii[i] = 1;
        } else {
            below_bytes[i][byte / 64] |= uint64_t{1} << (byte % 64);
        }
        below_non_ascii[i] |= below_non_ascii[c];
        below_bytes[i][0] |= below_bytes[c][0];
        below_bytes[i][1] |= below_bytes[c][1];
        nodes[index].height = std::max(nodes[index].height, nodes[static_cast<size_t>(child)].height + 1);
    }
    nodes[index].depth = static_cast<int32_t>(depth);
    nodes[index].subtree_token_end = static_cast<int32_t>(tokens.size());
    return index;
}

size_t GrammarMatcher::VectorHash::operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (const int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const ParsedGrammar> grammar, std::shared_ptr<const TokenTrie> trie)
    : grammar_(std::move(grammar)), trie_(std::move(trie)), max_nodes_(kMaxNodes), max_sets_(kMaxSets) {
    std::vector<int32_t> none;
    intern_set(none);  // id 0: dead
    std::vector<int32_t> start;
    const auto& elements = grammar_->elements;
    for (int32_t pos = grammar_->rule_start[grammar_->root];; ++pos) {
        // pos: start of an alternative of root
        if (ends_alternative(elements[pos])) {
            start.push_back(-1);
        } else {
            expand(intern_node(pos, -1), start);
            while (!ends_alternative(elements[pos])) ++pos;
        }
        if (elements[pos].type == ElementType::end) break;
    }
    state_.set = intern_set(start);
    set_chain_targets();
    set_chain_markers();
    set_class_chains();
    for (size_t r = 0; r < grammar_->rule_start.size(); ++r) {
        const size_t end =
            r + 1 < grammar_->rule_start.size() ? static_cast<size_t>(grammar_->rule_start[r + 1]) : elements.size();
        pos_rule_.resize(end, static_cast<int32_t>(r));
    }
    // The grammar as it was parsed (not its text: equal up to spacing and comments) keys the shared cache.
    std::string grammar_key;
    auto put = [&grammar_key](uint32_t v) { grammar_key.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(static_cast<uint32_t>(grammar_->root));
    for (const int32_t r : grammar_->rule_start) put(static_cast<uint32_t>(r));
    for (const Element& e : elements) {
        put(static_cast<uint32_t>(e.type));
        put(e.value);
    }
    space_ = MaskCache::instance().space(trie_->fingerprint(), grammar_key);
}

// The fewest code points each rule matches (a fixpoint over the rules), then per repetition chain the
// fewest a non-empty item matches (at least 1) and the collapse target (grammar_mask.cpp): the smallest t
// with (t - 1) * item_min - 3 >= the longest token, at most the chain's top count.
void GrammarMatcher::set_chain_targets() {
    const auto& elements = grammar_->elements;
    constexpr int32_t kInf = 1 << 20;
    auto sequence_min = [&](std::vector<int32_t>& rule_min, int32_t pos) {  // from pos to its alternative's end
        int32_t total = 0;
        while (!ends_alternative(elements[static_cast<size_t>(pos)])) {
            if (elements[static_cast<size_t>(pos)].type == ElementType::rule_ref) {
                total += rule_min[elements[static_cast<size_t>(pos)].value];
                ++pos;
            } else {
                total += 1;
                pos = class_end(elements, pos);
            }
            total = std::min(total, kInf);
        }
        return std::pair{total, pos};
    };
    // A work list rather than passes over all rules until nothing changes: a chain of n rules each
    // referring to the next settles one rule per pass, n^2 work (100k rules: minutes).
    const size_t n_rules = grammar_->rule_start.size();
    std::vector<std::vector<int32_t>> referrers(n_rules);  // referrers[s]: rules whose elements refer to s
    for (size_t r = 0; r < n_rules; ++r) {
        for (int32_t pos = grammar_->rule_start[r];; ++pos) {
            const Element& e = elements[static_cast<size_t>(pos)];
            if (e.type == ElementType::rule_ref) referrers[e.value].push_back(static_cast<int32_t>(r));
            if (e.type == ElementType::end) break;
        }
    }
    std::vector<int32_t> rule_min(n_rules, kInf);
    std::deque<int32_t> work;
    std::vector<bool> queued(n_rules, true);
    for (size_t r = 0; r < n_rules; ++r) work.push_back(static_cast<int32_t>(r));
    while (!work.empty()) {
        const int32_t r = work.front();
        work.pop_front();
        queued[r] = false;
        int32_t best = kInf;
        for (int32_t pos = grammar_->rule_start[r];; ++pos) {
            const auto [n, end] = sequence_min(rule_min, pos);
            best = std::min(best, n);
            pos = end;
            if (elements[static_cast<size_t>(pos)].type == ElementType::end) break;
        }
        if (best < rule_min[r]) {
            rule_min[r] = best;
            for (const int32_t q : referrers[r]) {
                if (!queued[q]) {
                    queued[q] = true;
                    work.push_back(q);
                }
            }
        }
    }
    const int32_t longest = trie_->max_token_bytes();
    for (const auto& chain : grammar_->repeat_chains) {
        // R_1's first alternative is the item.
        const int32_t item_min = std::max(1, sequence_min(rule_min, grammar_->rule_start[chain.front()]).first);
        const int32_t needed = (longest + 3 + item_min - 1) / item_min + 1;
        chain_item_min_.push_back(item_min);
        chain_target_.push_back(std::min(static_cast<int32_t>(chain.size()), needed));
    }
}

int32_t GrammarMatcher::intern_node(int32_t pos, int32_t parent) {
    const uint64_t k = key(pos, static_cast<uint32_t>(parent));
    const auto [it, inserted] = node_ids_.emplace(k, static_cast<int32_t>(nodes_.size()));
    if (inserted) nodes_.push_back({pos, parent});
    return it->second;
}

int32_t GrammarMatcher::intern_set(std::vector<int32_t>& stacks) {
    std::sort(stacks.begin(), stacks.end());
    stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
    const auto [it, inserted] = set_ids_.emplace(stacks, static_cast<int32_t>(sets_.size()));
    if (inserted) sets_.push_back(stacks);
    return it->second;
}

// Adds to `out` the stacks `stack` stands for once every rule reference on top is replaced by the
// alternatives of its rule (recursively): stacks whose top is a character class, or -1 (empty).
// An explicit work list instead of recursion: a chain of rules that each start with the next one
// (r1 ::= r2 "x", r2 ::= r3 "y", ...) is as deep as the grammar is long. Work is taken in the order the
// recursion would take it (alternatives first to last, each expanded fully before the next), and a node
// is interned when its work is taken, so node ids come out as they did.
void GrammarMatcher::expand(int32_t stack, std::vector<int32_t>& out) {
    struct Work {
        int32_t stack;     // expand this stack (when alt < 0)
        int32_t alt = -1;  // else: the stack (alt, rest)
        int32_t rest = -1;
    };
    std::vector<Work> work{{stack}};
    std::vector<Work> alternatives;
    const auto& elements = grammar_->elements;
    while (!work.empty()) {
        const Work w = work.back();
        work.pop_back();
        const int32_t s = w.alt < 0 ? w.stack : intern_node(w.alt, w.rest);
        if (s < 0) {
            out.push_back(-1);
            continue;
        }
        const auto [pos, parent] = nodes_[static_cast<size_t>(s)];
        if (elements[pos].type != ElementType::rule_ref) {
            out.push_back(s);
            continue;
        }
        const int32_t rest = ends_alternative(elements[pos + 1]) ? parent : intern_node(pos + 1, parent);
        alternatives.clear();
        for (int32_t alt = grammar_->rule_start[elements[pos].value];; ++alt) {
            if (ends_alternative(elements[alt])) {
                alternatives.push_back({rest});
            } else {
                alternatives.push_back({-1, alt, rest});
                while (!ends_alternative(elements[alt])) ++alt;
            }
            if (elements[alt].type == ElementType::end) break;
        }
        work.insert(work.end(), alternatives.rbegin(), alternatives.rend());
    }
}

int32_t GrammarMatcher::transition(int32_t set, uint32_t code_point) {
    if (code_point < 128) {
        if (ascii_transitions_.size() <= static_cast<size_t>(set)) {
            std::array<int32_t, 128> unknown;
            unknown.fill(-1);
            ascii_transitions_.resize(sets_.size(), unknown);
        }
        int32_t& cached = ascii_transitions_[static_cast<size_t>(set)][code_point];
        if (cached < 0) {
            const int32_t next = compute_transition(set, code_point);
            ascii_transitions_[static_cast<size_t>(set)][code_point] = next;  // (the vector may have grown)
            return next;
        }
        return cached;
    }
    const uint64_t k = key(set, code_point);
    if (const auto it = transitions_.find(k); it != transitions_.end()) return it->second;
    const int32_t result = compute_transition(set, code_point);
    transitions_.emplace(k, result);
    return result;
}

int32_t GrammarMatcher::compute_transition(int32_t set, uint32_t code_point) {
    const auto& elements = grammar_->elements;
    std::vector<int32_t> out;
    const std::vector<int32_t> stacks = sets_[static_cast<size_t>(set)];
    for (const int32_t s : stacks) {
        if (s < 0) continue;
        const auto [pos, parent] = nodes_[static_cast<size_t>(s)];
        if (!class_matches(elements, pos, code_point)) continue;
        const int32_t after = class_end(elements, pos);
        expand(ends_alternative(elements[after]) ? parent : intern_node(after, parent), out);
    }
    return intern_set(out);
}

uint64_t GrammarMatcher::state_key(const State& state) {
    return key(state.set, (state.length << 28) | (state.remaining << 24) | state.partial);
}

// Whether some code point that starts with the unfinished character's bits, encoded in its length
// without an overlong form, at most U+10FFFF and not a surrogate, can match some stack's top.
bool GrammarMatcher::partial_possible(int32_t set, const State& state) {
    const uint64_t k = state_key(State{set, state.partial, state.remaining, state.length});
    if (const auto it = partials_.find(k); it != partials_.end()) return it->second;
    static constexpr uint32_t kMinByLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t lo = state.partial << (6 * state.remaining);
    const uint32_t hi = std::min<uint32_t>(lo | ((1u << (6 * state.remaining)) - 1), 0x10FFFF);
    lo = std::max(lo, kMinByLength[state.length]);
    bool possible = false;
    // Surrogates (U+D800..U+DFFF) split the range in two.
    const std::pair<uint32_t, uint32_t> ranges[2] = {{lo, std::min<uint32_t>(hi, 0xD7FF)},
                                                     {std::max<uint32_t>(lo, 0xE000), hi}};
    for (const int32_t s : sets_[static_cast<size_t>(set)]) {
        if (s < 0) continue;
        for (const auto& [a, b] : ranges) {
            if (a <= b && class_intersects(grammar_->elements, nodes_[static_cast<size_t>(s)].first, a, b)) {
                possible = true;
            }
        }
        if (possible) break;
    }
    partials_.emplace(k, possible);
    return possible;
}

bool GrammarMatcher::step(State& state, uint8_t byte) {
    uint32_t code_point;
    if (state.remaining > 0) {
        if ((byte & 0xC0) != 0x80) return false;
        state.partial = (state.partial << 6) | (byte & 0x3F);
        if (--state.remaining > 0) return partial_possible(state.set, state);
        code_point = state.partial;
        state.partial = 0;
        // Overlong forms, surrogates and values past U+10FFFF match nothing.
        static constexpr uint32_t kMinByLength[5] = {0, 0, 0x80, 0x800, 0x10000};
        const bool valid = code_point >= kMinByLength[state.length] && code_point <= 0x10FFFF &&
                           !(code_point >= 0xD800 && code_point <= 0xDFFF);
        state.length = 0;
        if (!valid) return false;
    } else if (byte < 0x80) {
        code_point = byte;
    } else {
        if (byte >= 0xC0 && byte < 0xE0) {
            state.partial = byte & 0x1F;
            state.remaining = 1;
        } else if (byte >= 0xE0 && byte < 0xF0) {
            state.partial = byte & 0x0F;
            state.remaining = 2;
        } else if (byte >= 0xF0 && byte < 0xF8) {
            state.partial = byte & 0x07;
            state.remaining = 3;
        } else {
            return false;  // a continuation byte or 0xF8.. cannot start a character
        }
        state.length = state.remaining + 1;
        return partial_possible(state.set, state);
    }
    state.set = transition(state.set, code_point);
    return state.set != 0;
}

// One token's bit of the mask without the mask: its bytes stepped from the current state (the path the
// trie walk takes to it; a token in no trie node is never allowed), end tokens iff the grammar can end.
bool GrammarMatcher::is_allowed(int32_t token) {
    if (token < 0 || token >= trie_->n_vocab()) return false;
    if (trie_->is_end_token(token)) return can_end();
    const std::string& piece = trie_->piece(token);
    if (!trie_->is_matchable(token) || piece.empty()) return false;
    compact_if_large();
    State next = state_;
    for (const char b : piece) {
        if (!step(next, static_cast<uint8_t>(b))) return false;
    }
    return true;
}

void GrammarMatcher::accept_token(int32_t token) {
    if (!is_allowed(token)) {
        throw Error(ErrorCode::invalid_argument,
                    "token " + std::to_string(token) + " is not allowed by the grammar here");
    }
    if (trie_->is_end_token(token)) {
        std::vector<int32_t> ended{-1};
        state_ = State{intern_set(ended), 0, 0, 0};
        return;
    }
    if (!accept_bytes(trie_->piece(token))) {
        throw Error(ErrorCode::internal, "grammar: token " + std::to_string(token) + " was allowed but rejected");
    }
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
    State next = state_;
    for (const char b : bytes) {
        if (!step(next, static_cast<uint8_t>(b))) return false;
    }
    state_ = next;
    return true;
}

bool GrammarMatcher::can_end() const {
    const auto& stacks = sets_[static_cast<size_t>(state_.set)];
    return state_.remaining == 0 && !stacks.empty() && stacks.front() == -1;
}

bool GrammarMatcher::must_end() const { return can_end() && sets_[static_cast<size_t>(state_.set)].size() == 1; }

bool GrammarMatcher::is_dead() const { return state_.set == 0; }

// Every byte but the four whitespace ones stepped from the current state (transitions are cached: after
// the first time a state is asked, a lookup per byte).
bool GrammarMatcher::only_whitespace_may_follow() {
    if (!can_end()) return false;
    for (int b = 0; b < 256; ++b) {
        if (b == ' ' || b == '\t' || b == '\n' || b == '\r') continue;
        State probe = state_;
        if (step(probe, static_cast<uint8_t>(b))) return false;
    }
    return true;
}

void GrammarMatcher::set_cache_limits(size_t max_nodes, size_t max_sets) {
    max_nodes_ = max_nodes;
    max_sets_ = max_sets;
}

// Every cache refers to node ids; when the node table has grown large (a long, deeply nested
// generation), rebuild it from the current stacks alone.
void GrammarMatcher::compact_if_large() {
    if (nodes_.size() < max_nodes_ && sets_.size() < max_sets_ && transitions_.size() < max_nodes_) return;
    std::vector<std::vector<int32_t>> paths;  // each current stack as positions, bottom first
    for (const int32_t s : sets_[static_cast<size_t>(state_.set)]) {
        std::vector<int32_t> path;
        for (int32_t n = s; n >= 0; n = nodes_[static_cast<size_t>(n)].second)
            path.push_back(nodes_[static_cast<size_t>(n)].first);
        std::reverse(path.begin(), path.end());
        paths.push_back(std::move(path));
    }
    const bool had_empty =
        !sets_[static_cast<size_t>(state_.set)].empty() && sets_[static_cast<size_t>(state_.set)].front() == -1;
    nodes_.clear();
    node_ids_.clear();
    sets_.clear();
    set_ids_.clear();
    transitions_.clear();
    ascii_transitions_.clear();
    partials_.clear();
    masks_.clear();
    exact_canon_.clear();
    loose_canon_.clear();
    chain_tops_.clear();
    std::vector<int32_t> none;
    intern_set(none);
    std::vector<int32_t> stacks;
    for (const auto& path : paths) {
        int32_t s = -1;
        for (const int32_t pos : path) s = intern_node(pos, s);
        if (!path.empty()) stacks.push_back(s);
    }
    if (had_empty) stacks.push_back(-1);
    state_.set = intern_set(stacks);
}

}  // namespace kvstash::grammar
