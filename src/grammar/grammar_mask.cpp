// The token mask of a matcher state (grammar_matcher.h): the trie walk, and the ways a mask computed
// before is reused instead of walked again.
//
// Counted repetitions. x{m,n} leaves rules R_k = "at most k more x" (gbnf_parse.h), and a stack node
// inside R_k differs from the same node in R_j only in how many more x may follow. A node's suffix is
// (rest of this x) x^0..(k-1); when every non-empty x is at least q code points, a string of up to
// (k - 1) * q - 1 code points holds at most k - 2 whole copies plus a started one, so R_k and R_j accept
// the same strings of up to (min(k, j) - 1) * q - 1 code points. A stack's language is the concatenation
// of its nodes' suffixes and a set's the union of its stacks', so rewriting nodes R_k -> R_j keeps every
// such string accepted or rejected alike. A token of b bytes tests strings of at most b + 2 code points
// (a character left unfinished from before, and one completing its last character), so tokens of up to
// (min(k, j) - 1) * q - 3 bytes are allowed alike. Hence, per chain with target t (the least count for
// which that covers the longest token, at most the chain's top; set_chain_targets):
//   exact: counts above t are rewritten to t before the cache lookup: those states have the same mask,
//          so one is computed for them all;
//   loose: the mask of a state with counts below t is computed from the mask of the state with those
//          counts raised to t (one shared "base" for a whole line of a list, say): a trie subtree whose
//          tokens are all short enough takes the base's bits, only the longer tokens are walked.
// Markers (repeat_marker.cpp). When every copy of x holds some ASCII byte m at least q_m times (the
// list item "- " ... "\n" holds "\n"), the same argument counts m instead of code points: a string with
// at most (min(k, j) - 1) * q_m - 1 m's cannot hold k - 1 whole copies past the current one, so R_k and R_j
// accept it alike; the unfinished characters around a token are not ASCII and hold no m. So a token holding
// m at most that many times (any length) takes the base's bit too: a line of a list walks only the
// tokens with a newline, however few lines are left.
// Runs of one character class (class_chain_mask.cpp) take their masks from a table, not from a walk.
// Shared: a mask not in this matcher's cache is looked up in the process-wide MaskCache (mask_cache.h)
// by the state written as grammar positions, and a computed one is stored there.
#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>

#include "grammar/grammar_matcher.h"
#include "grammar/mask_cache.h"

namespace kvstash::grammar {

namespace {

constexpr size_t kMaxMasks = 512;      // cached token masks per matcher (n_vocab / 8 bytes each)
constexpr int32_t kLooseMinBytes = 4;  // loose reuse when it spares the walk at least the tokens of <= 4 bytes
// A closed subtree (every byte below leads the state back to itself) is allowed whole when it holds at
// least this many tokens; smaller ones are walked (checking the bytes would cost about as much).
constexpr int32_t kClosedMinTokens = 8;

}  // namespace

bool GrammarMatcher::closed_under(int32_t set, int32_t node) {
    const TokenTrie& trie = *trie_;
    if (trie.below_non_ascii[static_cast<size_t>(node)]) return false;
    for (size_t w = 0; w < 2; ++w) {
        for (uint64_t bits = trie.below_bytes[static_cast<size_t>(node)][w]; bits != 0; bits &= bits - 1) {
            const auto byte = static_cast<uint32_t>(64 * w + static_cast<size_t>(__builtin_ctzll(bits)));
            if (transition(set, byte) != set) return false;
        }
    }
    return true;
}

bool GrammarMatcher::decided_alike(int32_t node, const std::vector<Bound>& bounds) const {
    const TokenTrie::Node& n = trie_->nodes[static_cast<size_t>(node)];
    for (const Bound& b : bounds) {
        if (n.depth + n.height <= b.bytes) continue;
        if (b.count >= 0 && (*chain_marker_counts_[static_cast<size_t>(b.chain)])[static_cast<size_t>(node)] <= b.count)
            continue;
        return false;
    }
    return true;
}

void GrammarMatcher::compute_mask(const State& start, std::vector<uint64_t>& mask, const std::vector<uint64_t>* base,
                                  const std::vector<Bound>* bounds, bool skip_closed) {
    const TokenTrie& trie = *trie_;
    mask.assign((static_cast<size_t>(trie.n_vocab()) + 63) / 64, 0);
    auto allow = [&mask](int32_t id) { mask[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64); };
    const auto& start_stacks = sets_[static_cast<size_t>(start.set)];
    if (start.remaining == 0 && !start_stacks.empty() && start_stacks.front() == -1) {
        for (const int32_t id : trie.end_tokens()) {
            if (id >= 0 && id < trie.n_vocab()) allow(id);
        }
    }
    struct Frame {
        int32_t node;
        State state;
    };
    std::vector<Frame> todo{{0, start}};
    while (!todo.empty()) {
        const Frame frame = todo.back();
        todo.pop_back();
        const TokenTrie::Node& node = trie.nodes[static_cast<size_t>(frame.node)];
        for (int32_t c = node.first_child; c < node.first_child + node.n_children; ++c) {
            const int32_t child = trie.child_node[static_cast<size_t>(c)];
            const TokenTrie::Node& cn = trie.nodes[static_cast<size_t>(child)];
            if (base != nullptr && decided_alike(child, *bounds)) {
                // Every token below is short enough (or holds few enough markers) to be decided alike
                // from the base state.
                for (int32_t t = cn.first_token; t < cn.subtree_token_end; ++t) {
                    const int32_t id = trie.tokens[static_cast<size_t>(t)];
                    if (((*base)[static_cast<size_t>(id) / 64] >> (id % 64)) & 1) allow(id);
                }
                continue;
            }
            ++stats_.stepped_nodes;
            State next = frame.state;
            const uint8_t byte = trie.child_byte[static_cast<size_t>(c)];
            if (next.remaining == 0 && byte < 0x80) {
                // The hot path, step() inlined: an ASCII character from a set whose table row is filled.
                const auto set = static_cast<size_t>(next.set);
                const int32_t cached = set < ascii_transitions_.size() ? ascii_transitions_[set][byte] : -1;
                next.set = cached >= 0 ? cached : transition(next.set, byte);
                if (next.set == 0) continue;
            } else if (!step(next, byte)) {
                continue;
            }
            if (skip_closed && next.remaining == 0 && cn.subtree_token_end - cn.first_token >= kClosedMinTokens &&
                closed_under(next.set, child)) {
                // Every token below steps `next` back to itself (an accepting, live set): all allowed.
                ++stats_.closed_subtrees;
                for (int32_t t = cn.first_token; t < cn.subtree_token_end; ++t)
                    allow(trie.tokens[static_cast<size_t>(t)]);
                continue;
            }
            for (int32_t t = cn.first_token; t < cn.first_token + cn.n_tokens; ++t)
                allow(trie.tokens[static_cast<size_t>(t)]);
            if (cn.n_children > 0) todo.push_back({child, next});
        }
    }
}

int32_t GrammarMatcher::map_position(int32_t pos, bool loose, Canonical& into) const {
    const auto rule = static_cast<size_t>(pos_rule_[static_cast<size_t>(pos)]);
    const int32_t chain = grammar_->rule_chain[rule];
    if (chain < 0) return pos;
    const auto c = static_cast<size_t>(chain);
    const int32_t k = grammar_->rule_count[rule];
    const int32_t target = chain_target_[c];
    if (target < 2) return pos;  // R_1 differs from the others in layout (no reference)
    // Tokens of up to `bytes` bytes, or holding the marker at most `count` times, are allowed alike from
    // counts k and target (see the top).
    const int32_t copies = std::min(k, target) - 1;
    const int32_t bytes = copies * chain_item_min_[c] - 3;
    const int32_t count = chain_marker_[c] >= 0 ? std::min(copies * chain_marker_min_[c] - 1, 254) : -1;
    const bool rewrite = loose ? (k < target && (bytes >= kLooseMinBytes || count >= 0)) : k > target;
    if (!rewrite) return pos;
    into.changed = true;
    auto bound =
        std::find_if(into.bounds.begin(), into.bounds.end(), [chain](const Bound& b) { return b.chain == chain; });
    if (bound == into.bounds.end()) {
        into.bounds.push_back(Bound{chain, bytes, count});
    } else {
        bound->bytes = std::min(bound->bytes, bytes);
        bound->count = std::min(bound->count, count);
    }
    const int32_t to_rule = grammar_->repeat_chains[c][static_cast<size_t>(target - 1)];
    return grammar_->rule_start[static_cast<size_t>(to_rule)] + (pos - grammar_->rule_start[rule]);
}

int32_t GrammarMatcher::map_stack(int32_t stack, bool loose, Canonical& into) {
    scratch_.clear();
    for (int32_t n = stack; n >= 0; n = nodes_[static_cast<size_t>(n)].second) scratch_.push_back(n);
    const std::vector<int32_t> path = scratch_;  // top first
    bool changed = false;
    int32_t s = -1;
    for (size_t i = path.size(); i-- > 0;) {
        const int32_t pos = nodes_[static_cast<size_t>(path[i])].first;
        const int32_t mapped = map_position(pos, loose, into);
        if (!changed && mapped == pos) {
            s = path[i];  // the same node over the same (unchanged) parent
            continue;
        }
        changed = true;
        s = intern_node(mapped, s);
    }
    return s;
}

GrammarMatcher::Canonical GrammarMatcher::canonical(int32_t set, bool loose) {
    auto& cache = loose ? loose_canon_ : exact_canon_;
    if (static_cast<size_t>(set) < cache.size() && cache[static_cast<size_t>(set)].set >= 0)
        return cache[static_cast<size_t>(set)];
    Canonical result;
    result.set = set;
    if (!grammar_->repeat_chains.empty()) {
        std::vector<int32_t> stacks = sets_[static_cast<size_t>(set)];
        for (int32_t& s : stacks) {
            if (s >= 0) s = map_stack(s, loose, result);
        }
        if (result.changed) result.set = intern_set(stacks);
    }
    if (cache.size() < sets_.size()) cache.resize(sets_.size());
    cache[static_cast<size_t>(set)] = result;
    return result;
}

std::string GrammarMatcher::shared_key(const State& state) const {
    std::vector<std::string> stacks;
    for (const int32_t s : sets_[static_cast<size_t>(state.set)]) {
        std::string positions(1, s < 0 ? 'E' : 'S');  // E: the empty stack
        for (int32_t n = s; n >= 0; n = nodes_[static_cast<size_t>(n)].second) {
            const int32_t pos = nodes_[static_cast<size_t>(n)].first;
            positions.append(reinterpret_cast<const char*>(&pos), sizeof pos);
        }
        stacks.push_back(std::move(positions));
    }
    std::sort(stacks.begin(), stacks.end());
    std::string key(sizeof space_, '\0');
    std::memcpy(key.data(), &space_, sizeof space_);
    const uint32_t unfinished[3] = {state.partial, state.remaining, state.length};
    key.append(reinterpret_cast<const char*>(unfinished), sizeof unfinished);
    for (const std::string& s : stacks) {
        const auto n = static_cast<uint32_t>(s.size());
        key.append(reinterpret_cast<const char*>(&n), sizeof n);
        key += s;
    }
    return key;
}

const std::vector<uint64_t>& GrammarMatcher::mask_of(const State& state) {
    const uint64_t k = state_key(state);
    if (const auto it = masks_.find(k); it != masks_.end()) return it->second;
    MaskCache& shared = MaskCache::instance();
    const std::string key = shared_key(state);
    if (auto found = shared.find(key)) {
        ++stats_.shared_hits;
        if (masks_.size() >= kMaxMasks) masks_.clear();
        return masks_.emplace(k, *found).first->second;
    }
    if (!class_chain_mask(state, mask_)) {  // inside a class repetition: from the class's table, no walk
        const Canonical loose = canonical(state.set, true);
        if (loose.set != state.set) {
            State base_state = state;
            base_state.set = loose.set;
            const std::vector<uint64_t> base = mask_of(base_state);  // a copy: the cache may be cleared below
            compute_mask(state, mask_, &base, &loose.bounds, true);
            ++stats_.pruned_walks;
        } else {
            compute_mask(state, mask_, nullptr, nullptr, true);
            ++stats_.full_walks;
        }
    }
    shared.insert(key, std::make_shared<const Mask>(mask_));
    if (masks_.size() >= kMaxMasks) masks_.clear();
    return masks_.emplace(k, mask_).first->second;
}

const std::vector<uint64_t>* GrammarMatcher::cached_mask() {
    compact_if_large();
    if (!reuse_) {
        const auto it = masks_.find(state_key(state_));
        return it == masks_.end() ? nullptr : &it->second;
    }
    State canonical_state = state_;
    canonical_state.set = canonical(state_.set, false).set;
    const uint64_t k = state_key(canonical_state);
    if (const auto it = masks_.find(k); it != masks_.end()) return &it->second;
    if (auto found = MaskCache::instance().find(shared_key(canonical_state))) {
        ++stats_.shared_hits;
        if (masks_.size() >= kMaxMasks) masks_.clear();
        return &masks_.emplace(k, *found).first->second;
    }
    return nullptr;
}

const std::vector<uint64_t>& GrammarMatcher::allowed_tokens() {
    compact_if_large();
    if (!reuse_) {
        const uint64_t k = state_key(state_);
        if (const auto it = masks_.find(k); it != masks_.end()) return it->second;
        if (masks_.size() >= kMaxMasks) masks_.clear();
        compute_mask(state_, mask_, nullptr, nullptr, false);  // the plain reference: no shortcut
        ++stats_.full_walks;
        return masks_.emplace(k, mask_).first->second;
    }
    State canonical_state = state_;
    canonical_state.set = canonical(state_.set, false).set;
    return mask_of(canonical_state);
}

}  // namespace kvstash::grammar
