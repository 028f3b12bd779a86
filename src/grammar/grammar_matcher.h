// Matching a ParsedGrammar against UTF-8 bytes, and which vocabulary tokens may come next.
//
// The matcher keeps the set of parse stacks of a top-down (LL, backtracking-free) parse: each stack is
// the list of grammar positions still to match, top first; a stack whose top is a character class
// waits for a code point, the empty stack means the grammar has matched completely. Stacks are
// hash-consed (a node = (position, parent) is stored once), so a stack is one int and equal stacks are
// equal ints; a set of stacks is interned too. Transitions (set, code point) -> set are cached, and so
// is the token mask of each state: generation keeps returning to the same few states (inside a JSON
// string, after a comma), and those steps cost a lookup.
//
// A token may come next iff all its bytes can be consumed (its last character may be unfinished, if
// some completion can match); the end-of-generation tokens iff the grammar can end here. The mask is
// computed by walking the vocabulary's byte trie once, depth first, carrying the state: a subtree is
// skipped as soon as its prefix is rejected.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/class_run_table.h"
#include "grammar/gbnf_parse.h"

namespace kvstash::grammar {

// The vocabulary's token byte strings as a trie (built once per tokenizer, shared by every matcher).
class TokenTrie {
public:
    // pieces[i]: the bytes of token i. Tokens in `end_tokens` are allowed exactly when the grammar can
    // end; tokens with matchable[i] == 0 (control tokens) or an empty piece are never allowed otherwise.
    TokenTrie(std::vector<std::string> pieces, const std::vector<uint8_t>& matchable, std::vector<int32_t> end_tokens);

    struct Node {
        int32_t first_child = 0, n_children = 0;  // into child_byte / child_node
        int32_t first_token = 0, n_tokens = 0;    // into tokens: ids whose piece ends here
        int32_t subtree_token_end = 0;            // tokens[first_token .. this): every id in the subtree (depth first)
        int32_t depth = 0;                        // bytes of the prefix
        int32_t height = 0;                       // the longest token in the subtree is depth + height bytes
    };
    int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
    const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
    bool is_end_token(int32_t id) const { return is_end_[static_cast<size_t>(id)] != 0; }
    bool is_matchable(int32_t id) const { return matchable_[static_cast<size_t>(id)] != 0; }
    const std::vector<int32_t>& end_tokens() const { return end_tokens_; }
    int32_t max_token_bytes() const { return nodes[0].height; }  // of the tokens in the trie
    // A hash of the pieces, which are matchable and the end tokens: equal vocabularies, equal masks.
    uint64_t fingerprint() const { return fingerprint_; }

    std::vector<Node> nodes;  // nodes[0]: the root (empty prefix)
    std::vector<uint8_t> child_byte;
    std::vector<int32_t> child_node;
    std::vector<int32_t> tokens;
    // Per node: the ASCII bytes on the edges below it (bit b of word b / 64), and whether a byte >= 0x80 is
    // (then below_bytes is not used). A state whose every one of those bytes leads back to itself accepts
    // the whole subtree (grammar_mask.cpp).
    std::vector<std::array<uint64_t, 2>> below_bytes;
    std::vector<uint8_t> below_non_ascii;

    // How many vocabulary tokens hold ASCII byte b at least once (counted-repetition markers, repeat_marker.cpp).
    int32_t tokens_containing(uint8_t b) const { return tokens_containing_[b & 0x7F]; }
    // Per node: the most times ASCII byte b occurs in one token of its subtree (the whole token, the
    // prefix above the node included), saturated at 255. Built on first use, once per trie and byte
    // (thread-safe); repeat_marker.cpp.
    const std::vector<uint8_t>& marker_counts(uint8_t b) const;

private:
    int32_t build(const std::vector<int32_t>& order, size_t lo, size_t hi, size_t depth);
    void count_ascii_bytes(const std::vector<int32_t>& ids);  // tokens_containing_

    std::vector<std::string> pieces_;
    std::vector<uint8_t> matchable_;
    std::vector<uint8_t> is_end_;
    std::vector<int32_t> end_tokens_;
    uint64_t fingerprint_ = 0;
    std::array<int32_t, 128> tokens_containing_{};
    mutable std::mutex marker_mutex_;
    mutable std::array<std::unique_ptr<std::vector<uint8_t>>, 128> marker_counts_;
};

class GrammarMatcher {
public:
    GrammarMatcher(std::shared_ptr<const ParsedGrammar> grammar, std::shared_ptr<const TokenTrie> trie);

    // Bit i (word i / 64, bit i % 64) set: token i may come next. Valid until the next call.
    const std::vector<uint64_t>& allowed_tokens();
    // allowed_tokens() when it is at hand (this matcher's cache or the shared one), else null: computes none.
    const std::vector<uint64_t>* cached_mask();
    // Whether token's bit in allowed_tokens() is set, found by stepping its bytes alone (no mask).
    bool is_allowed(int32_t token);
    // Advances over the token's bytes (an end token: the grammar must be able to end, and then only
    // end tokens follow). Throws Error(invalid_argument) when the token is not allowed.
    void accept_token(int32_t token);
    // Advances over raw bytes; false (and no change) when they are rejected. For tests and prompts.
    bool accept_bytes(std::string_view bytes);
    bool can_end() const;   // the whole input so far is a sentence of the grammar
    bool must_end() const;  // and nothing can follow it
    // It can end, and only whitespace (space, tab, newline, carriage return) can follow it.
    bool only_whitespace_may_follow();
    bool is_dead() const;  // no stack left (never after accept_* succeeded)
    // Past these many stack nodes / stack sets the caches are dropped and rebuilt from the current stacks
    // (defaults bound a matcher's memory; tests set small ones to exercise the rebuild).
    void set_cache_limits(size_t max_nodes, size_t max_sets);
    // false: every new state's mask by a full trie walk, no count collapse, no shared cache (the plain
    // reference the tests compare the fast path with). Set before the first mask.
    void set_mask_reuse(bool reuse) { reuse_ = reuse; }
    // How the masks this matcher needed were found (tests, bench): trie walks of the whole trie, walks of
    // the long tokens only over a base mask, masks taken from the shared cache.
    struct MaskStats {
        size_t full_walks = 0, pruned_walks = 0, shared_hits = 0;
        size_t closed_subtrees = 0;    // trie subtrees allowed whole (every byte below loops back to the state)
        size_t stepped_nodes = 0;      // trie nodes the walks stepped the state into (their cost)
        size_t class_chain_masks = 0;  // masks from a class repetition's run table, no walk (class_chain_mask.cpp)
    };
    const MaskStats& mask_stats() const { return stats_; }

private:
    struct State {
        int32_t set = 0;         // interned stack set
        uint32_t partial = 0;    // bits of an unfinished UTF-8 character
        uint32_t remaining = 0;  // its bytes still to come (0: none pending)
        uint32_t length = 0;     // its length in bytes (2-4; 0: none pending)
    };
    // A key for the caches: the set and the unfinished character.
    static uint64_t state_key(const State& state);
    // Steps `state` over one byte; false when rejected.
    bool step(State& state, uint8_t byte);
    int32_t intern_node(int32_t pos, int32_t parent);
    int32_t intern_set(std::vector<int32_t>& stacks);  // sorts and deduplicates
    void expand(int32_t stack, std::vector<int32_t>& out);
    int32_t transition(int32_t set, uint32_t code_point);  // cached
    int32_t compute_transition(int32_t set, uint32_t code_point);
    bool partial_possible(int32_t set, const State& state);
    // The trie walk from `start`. With `base`: the mask of a state that accepts the same strings of up to
    // `prune` + 4 code points (grammar_mask.cpp), so a subtree whose tokens are at most `prune` bytes
    // long takes base's bits instead of being walked.
    // skip_closed: a subtree whose bytes all lead the state back to itself is allowed without walking it.
    struct Bound;
    void compute_mask(const State& start, std::vector<uint64_t>& mask, const std::vector<uint64_t>* base,
                      const std::vector<Bound>* bounds, bool skip_closed);
    bool closed_under(int32_t set, int32_t node);  // every byte below `node` leads `set` back to itself
    void compact_if_large();

    // Mask reuse (grammar_mask.cpp). A stack set with counted-repetition nodes R_k rewritten to another
    // count; per chain changed, which tokens are allowed alike from both: those of at most `bytes` bytes,
    // and (the chain has a marker, count >= 0) those holding the chain's marker byte at most `count` times.
    struct Bound {
        int32_t chain = 0;
        int32_t bytes = 0;
        int32_t count = -1;
    };
    struct Canonical {
        int32_t set = -1;
        bool changed = false;
        std::vector<Bound> bounds;  // one per chain changed (the least budgets over its nodes)
    };
    Canonical canonical(int32_t set, bool loose);
    int32_t map_stack(int32_t stack, bool loose, Canonical& into);
    int32_t map_position(int32_t pos, bool loose, Canonical& into) const;
    bool decided_alike(int32_t node, const std::vector<Bound>& bounds) const;  // every token below node
    void set_chain_targets();
    void set_chain_markers();  // repeat_marker.cpp
    // A state inside a run of one character class C (class_chain_mask.cpp): between `least` and `most`
    // more characters of C (C{m,n}: m copies, then the chain R_(n-m)), then the set `rest`;
    // class_pos -1: not that shape (-2: not computed).
    struct ChainTop {
        int32_t class_pos = -2;
        int32_t tail_pos = 0;  // the class of the characters after the first (often class_pos's)
        int32_t least = 0, most = 0;
        int32_t rest = 0;
    };
    void set_class_chains();
    ChainTop chain_top(int32_t set);
    bool same_class(int32_t a, int32_t b) const;  // the classes at elements a and b are equal
    bool class_chain_mask(const State& state, std::vector<uint64_t>& mask);  // false: not that shape
    const std::vector<uint64_t>& mask_of(const State& state);                // state: exact-canonical
    std::string shared_key(const State& state) const;

    struct VectorHash {
        size_t operator()(const std::vector<int32_t>& v) const;
    };

    std::shared_ptr<const ParsedGrammar> grammar_;
    std::shared_ptr<const TokenTrie> trie_;
    State state_;
    size_t max_nodes_, max_sets_;
    std::vector<std::pair<int32_t, int32_t>> nodes_;  // (grammar position, parent node or -1)
    std::unordered_map<uint64_t, int32_t> node_ids_;
    std::vector<std::vector<int32_t>> sets_;  // sets_[0]: the empty (dead) set; -1 in a set: the empty stack
    std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> set_ids_;
    std::unordered_map<uint64_t, int32_t> transitions_;
    // transitions_ for ASCII code points as a table per set (-1: not computed yet): the trie walk's
    // hot path, an array index instead of a hash lookup.
    std::vector<std::array<int32_t, 128>> ascii_transitions_;
    std::unordered_map<uint64_t, bool> partials_;
    std::unordered_map<uint64_t, std::vector<uint64_t>> masks_;
    std::vector<uint64_t> mask_;
    std::vector<int32_t> scratch_;

    bool reuse_ = true;
    // Per repetition chain: the count above which counts collapse (grammar_mask.cpp), and the fewest
    // code points a non-empty item matches.
    std::vector<int32_t> chain_target_, chain_item_min_;
    // Per chain: an ASCII byte every copy of the item holds at least chain_marker_min_ times (-1: none;
    // repeat_marker.cpp), and its per-node counts (TokenTrie::marker_counts).
    std::vector<int32_t> chain_marker_, chain_marker_min_;
    std::vector<const std::vector<uint8_t>*> chain_marker_counts_;
    std::vector<int32_t> chain_class_;  // per chain: 0 when its item is one character class, else -1
    std::unordered_map<uint64_t, std::shared_ptr<const ClassRunTable>> class_tables_;  // by (class, tail) position
    std::vector<ChainTop> chain_tops_;                                                 // by set id
    std::vector<int32_t> pos_rule_;                                                    // grammar position -> its rule
    std::vector<Canonical> exact_canon_, loose_canon_;  // by set id (set -1: not computed)
    MaskStats stats_;
    uint64_t space_ = 0;  // this grammar + vocabulary in MaskCache
};

}  // namespace kvstash::grammar
