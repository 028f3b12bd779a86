// The mask of a state inside a run of one character class (grammar_matcher.h), from the class's run
// table (class_run_table.h) instead of a trie walk.
//
// The state: one stack whose top is class C, followed in its rule by more copies of C and maybe a
// reference to a chain of C (C{m,n} is m copies of C then R_(n-m), where R_k ::= C R_(k-1) | (empty) is
// "at most k more"), then what follows, P: between `least` and `most` more characters of C, then P. The
// set is that stack alone, or that stack and expand(P) (the run may end here: least = 0). When no
// character of C can start P (no C character steps expand(P) to a live set), a token w is allowed exactly
// when
//   - all of w is in C, at most `most` characters (consumed inside the run; fewer than `least` is a
//     prefix of it), or
//   - its first r characters are in C with least <= r <= most, and expand(P) accepts the rest of w: the
//     run must end after exactly those r, since P cannot take a C character;
// a token of more than `most` characters of C is rejected. Tokens cut inside their last character are
// stepped whole. So one table per class serves every count and every context: a state's mask costs the
// allowed tokens' bits plus stepping the tokens whose first byte outside C expand(P) can take, instead of
// a walk of most of the trie (each character moves the count, so every step is a new state).
#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>

#include "grammar/class_run_table.h"
#include "grammar/grammar_matcher.h"

namespace kvstash::grammar {

namespace {

constexpr size_t kMaxTables =
    16;  // (vocabulary, class) tables kept (~0.5-1 MB each for 49k tokens); past it all are dropped
// Runs shorter than this with no chain (one literal character, [ab] [ab]) are walked: the walk is cut at
// the first byte there, and a table per class would cost more than it saves.
constexpr int32_t kMinRun = 4;
// Sets with more stacks than this are not looked at (JSON's many alternatives: not a run's shape).
constexpr size_t kMaxStacks = 16;

bool ends_alternative(const Element& e) { return e.type == ElementType::end || e.type == ElementType::alt; }

struct Tables {
    std::mutex mutex;
    std::unordered_map<std::string, std::shared_ptr<const ClassRunTable>> by_key;
};

Tables& tables() {
    static Tables t;
    return t;
}

// The code point at piece[i], its byte length in `len`; -1: not valid UTF-8 there, -2: cut by the end.
int64_t decode(const std::string& piece, size_t i, size_t& len) {
    static constexpr uint32_t kMinByLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    const auto lead = static_cast<uint8_t>(piece[i]);
    len = 1;
    if (lead < 0x80) return lead;
    uint32_t cp;
    if (lead >= 0xC0 && lead < 0xE0) {
        len = 2, cp = lead & 0x1Fu;
    } else if (lead >= 0xE0 && lead < 0xF0) {
        len = 3, cp = lead & 0x0Fu;
    } else if (lead >= 0xF0 && lead < 0xF8) {
        len = 4, cp = lead & 0x07u;
    } else {
        return -1;
    }
    for (size_t j = 1; j < len; ++j) {
        if (i + j >= piece.size()) return -2;
        const auto b = static_cast<uint8_t>(piece[i + j]);
        if ((b & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (b & 0x3Fu);
    }
    if (cp < kMinByLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    return cp;
}

std::shared_ptr<const ClassRunTable> build_table(const TokenTrie& trie, const std::vector<Element>& elements,
                                                 int32_t first, int32_t tail) {
    // ASCII membership as tables (most pieces are ASCII): [0] the first class, [1] the tail class.
    std::array<std::array<bool, 128>, 2> ascii{};
    for (uint32_t c = 0; c < 128; ++c) {
        ascii[0][c] = class_matches(elements, first, c);
        ascii[1][c] = class_matches(elements, tail, c);
    }
    auto table = std::make_shared<ClassRunTable>();
    table->break_at_start.assign((static_cast<size_t>(trie.n_vocab()) + 63) / 64, 0);
    std::vector<std::pair<int32_t, int32_t>> whole;  // (characters, id)
    std::vector<uint8_t> break_byte;                 // per breaks entry
    auto add_break = [&](int32_t id, int32_t offset, int32_t run) {
        if (run == 0) {
            table->break_at_start[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
        } else {
            table->breaks.push_back({id, offset, run});
            break_byte.push_back(static_cast<uint8_t>(trie.piece(id)[static_cast<size_t>(offset)]));
        }
    };
    // One token from byte `i`, `run` characters in so far (the pieces below a byte >= 0x80).
    auto classify = [&](int32_t id, size_t i, int32_t run) {
        const std::string& piece = trie.piece(id);
        for (size_t len = 1; i < piece.size(); i += len, ++run) {
            const int64_t cp = decode(piece, i, len);
            if (cp == -2) {
                table->unfinished.push_back(id);
                return;
            }
            if (cp < 0 || !class_matches(elements, run == 0 ? first : tail, static_cast<uint32_t>(cp))) {
                add_break(id, static_cast<int32_t>(i), run);
                return;
            }
        }
        whole.push_back({run, id});
    };
    // The trie depth first over ASCII prefixes in the class (one character per byte, so run = depth): a
    // byte outside the class breaks every token below at once.
    std::vector<int32_t> todo{0};
    while (!todo.empty()) {
        const auto n = static_cast<size_t>(todo.back());
        todo.pop_back();
        const TokenTrie::Node& node = trie.nodes[n];
        const int32_t run = node.depth;
        for (int32_t t = node.first_token; t < node.first_token + node.n_tokens; ++t)
            whole.push_back({run, trie.tokens[static_cast<size_t>(t)]});
        for (int32_t c = node.first_child; c < node.first_child + node.n_children; ++c) {
            const int32_t child = trie.child_node[static_cast<size_t>(c)];
            const uint8_t byte = trie.child_byte[static_cast<size_t>(c)];
            const TokenTrie::Node& cn = trie.nodes[static_cast<size_t>(child)];
            if (byte < 0x80 && ascii[run == 0 ? 0 : 1][byte]) {
                todo.push_back(child);
                continue;
            }
            for (int32_t t = cn.first_token; t < cn.subtree_token_end; ++t) {
                const int32_t id = trie.tokens[static_cast<size_t>(t)];
                if (byte < 0x80) {
                    add_break(id, run, run);
                } else {
                    classify(id, static_cast<size_t>(run), run);
                }
            }
        }
    }
    // The whole tokens by characters, the breaks by their byte (a counting sort).
    int32_t longest = 0;
    for (const auto& w : whole) longest = std::max(longest, w.first);
    std::vector<std::vector<int32_t>> by_length(static_cast<size_t>(longest) + 1);
    for (const auto& [n, id] : whole) by_length[static_cast<size_t>(n)].push_back(id);
    std::vector<uint64_t> upto((static_cast<size_t>(trie.n_vocab()) + 63) / 64, 0);
    for (const auto& ids : by_length) {
        for (const int32_t id : ids) upto[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
        table->in_class_upto.push_back(upto);
    }
    std::array<int32_t, 257> begin{};
    for (const uint8_t b : break_byte) ++begin[static_cast<size_t>(b) + 1];
    for (size_t b = 1; b < begin.size(); ++b) begin[b] += begin[b - 1];
    table->break_begin = begin;
    std::vector<ClassRunTable::Break> sorted(table->breaks.size());
    for (size_t k = 0; k < table->breaks.size(); ++k)
        sorted[static_cast<size_t>(begin[break_byte[k]]++)] = table->breaks[k];
    table->breaks = std::move(sorted);
    return table;
}

}  // namespace

std::shared_ptr<const ClassRunTable> class_run_table(const TokenTrie& trie, const std::vector<Element>& elements,
                                                     int32_t first, int32_t tail) {
    std::string key(sizeof(uint64_t), '\0');
    const uint64_t fingerprint = trie.fingerprint();
    std::copy_n(reinterpret_cast<const char*>(&fingerprint), sizeof fingerprint, key.data());
    for (const int32_t pos : {first, tail}) {
        for (int32_t p = pos; p < class_end(elements, pos); ++p) {
            key.push_back(static_cast<char>(elements[static_cast<size_t>(p)].type));
            key.append(reinterpret_cast<const char*>(&elements[static_cast<size_t>(p)].value), sizeof(uint32_t));
        }
        key.push_back('|');
    }
    Tables& t = tables();
    {
        const std::lock_guard lock(t.mutex);
        if (const auto it = t.by_key.find(key); it != t.by_key.end()) return it->second;
    }
    auto table = build_table(trie, elements, first, tail);  // outside the lock: another thread may build it too
    const std::lock_guard lock(t.mutex);
    if (t.by_key.size() >= kMaxTables) t.by_key.clear();
    return t.by_key.emplace(std::move(key), std::move(table)).first->second;
}

void clear_class_run_tables() {
    const std::lock_guard lock(tables().mutex);
    tables().by_key.clear();
}

// Per chain: whether its item is one character class (R_k ::= C R_(k-1) | (empty)).
void GrammarMatcher::set_class_chains() {
    const auto& elements = grammar_->elements;
    for (const auto& chain : grammar_->repeat_chains) {
        const int32_t pos = grammar_->rule_start[static_cast<size_t>(chain.front())];  // R_1 ::= C | (empty)
        const bool one_class = elements[static_cast<size_t>(pos)].type != ElementType::rule_ref &&
                               elements[static_cast<size_t>(class_end(elements, pos))].type == ElementType::alt;
        chain_class_.push_back(one_class ? 0 : -1);
    }
}

bool GrammarMatcher::same_class(int32_t a, int32_t b) const {
    const auto& elements = grammar_->elements;
    const int32_t n = class_end(elements, a) - a;
    if (class_end(elements, b) - b != n) return false;
    for (int32_t i = 0; i < n; ++i) {
        const Element& x = elements[static_cast<size_t>(a + i)];
        const Element& y = elements[static_cast<size_t>(b + i)];
        if (x.type != y.type || x.value != y.value) return false;
    }
    return true;
}

// The shape: one stack s whose top is class C followed (in its rule) by more copies of C and maybe a
// reference to a chain of C, then the rest; the set is {s} (at least one more C) or {s} and the rest's
// expansion (the run may end here). And no character of C can start the rest.
GrammarMatcher::ChainTop GrammarMatcher::chain_top(int32_t set) {
    if (static_cast<size_t>(set) < chain_tops_.size() && chain_tops_[static_cast<size_t>(set)].class_pos != -2)
        return chain_tops_[static_cast<size_t>(set)];
    ChainTop top;
    top.class_pos = -1;
    const auto& elements = grammar_->elements;
    const std::vector<int32_t> stacks = sets_[static_cast<size_t>(set)];
    for (const int32_t s : stacks) {
        if (s < 0 || stacks.size() > kMaxStacks) continue;
        const auto [c_pos, parent] = nodes_[static_cast<size_t>(s)];
        // The top's class A, then copies of one class B (the first one names it), then maybe a chain of B.
        int32_t least = 1, q = class_end(elements, c_pos), tail = -1;
        while (elements[static_cast<size_t>(q)].type != ElementType::rule_ref &&
               !ends_alternative(elements[static_cast<size_t>(q)]) && (tail < 0 || same_class(q, tail))) {
            if (tail < 0) tail = q;
            ++least;
            q = class_end(elements, q);
        }
        int32_t most = least;
        bool chain_after = false;
        if (elements[static_cast<size_t>(q)].type == ElementType::rule_ref) {
            const auto rule = elements[static_cast<size_t>(q)].value;
            const int32_t chain = grammar_->rule_chain[rule];
            if (chain >= 0 && chain_class_[static_cast<size_t>(chain)] == 0 &&
                (tail < 0 || same_class(grammar_->rule_start[rule], tail))) {
                if (tail < 0) tail = grammar_->rule_start[rule];
                most += grammar_->rule_count[rule];
                chain_after = true;
                ++q;
            }
        }
        if (tail < 0) tail = c_pos;
        const auto rule = static_cast<size_t>(pos_rule_[static_cast<size_t>(c_pos)]);
        const bool in_chain =
            grammar_->rule_chain[rule] >= 0 && chain_class_[static_cast<size_t>(grammar_->rule_chain[rule])] == 0;
        if (!chain_after && !in_chain && least < kMinRun) continue;
        std::vector<int32_t> rest;
        expand(ends_alternative(elements[static_cast<size_t>(q)]) ? parent : intern_node(q, parent), rest);
        const int32_t rest_set = intern_set(rest);
        // The other stacks: none, or exactly expand(P) (the run may end here); the empty stack (the
        // grammar may end here) only adds the end tokens, from the set itself.
        std::vector<int32_t> others, rest_stacks;
        for (const int32_t o : stacks) {
            if (o != s && o >= 0) others.push_back(o);
        }
        for (const int32_t r : sets_[static_cast<size_t>(rest_set)]) {
            if (r >= 0) rest_stacks.push_back(r);
        }
        if (!others.empty()) {
            if (rest_stacks != others) continue;
            least = 0;
        }
        bool disjoint = true;  // no character of A or B can start the rest
        for (const int32_t cls : {c_pos, tail}) {
            for (uint32_t c = 0; c < 128 && disjoint; ++c) {
                if (class_matches(elements, cls, c) && transition(rest_set, c) != 0) disjoint = false;
            }
            if (disjoint && class_intersects(elements, cls, 0x80, 0x10FFFF)) {
                for (const int32_t r : sets_[static_cast<size_t>(rest_set)]) {
                    if (r >= 0 && class_intersects(elements, nodes_[static_cast<size_t>(r)].first, 0x80, 0x10FFFF))
                        disjoint = false;
                }
            }
        }
        if (disjoint) top = ChainTop{c_pos, tail, least, most, rest_set};
        break;  // only one stack can be s
    }
    if (chain_tops_.size() < sets_.size()) chain_tops_.resize(sets_.size());
    chain_tops_[static_cast<size_t>(set)] = top;
    return top;
}

bool GrammarMatcher::class_chain_mask(const State& state, std::vector<uint64_t>& mask) {
    if (state.remaining != 0) return false;
    const ChainTop top = chain_top(state.set);
    if (top.class_pos < 0) return false;
    auto& table = class_tables_[(static_cast<uint64_t>(top.class_pos) << 32) | static_cast<uint32_t>(top.tail_pos)];
    if (!table) table = class_run_table(*trie_, grammar_->elements, top.class_pos, top.tail_pos);
    // Run 0 (a first character outside the class) where the run may end at once: the token as a whole
    // from the set after the run, by its mask (cached, or a walk cut early). Computed first: mask_of may
    // reuse `mask`'s storage.
    std::vector<uint64_t> after;
    if (top.least == 0) after = mask_of(State{canonical(top.rest, false).set, 0, 0, 0});
    const TokenTrie& trie = *trie_;
    const auto longest = static_cast<int32_t>(table->in_class_upto.size()) - 1;
    if (longest >= 0) {
        mask = table->in_class_upto[static_cast<size_t>(std::min(top.most, longest))];
    } else {
        mask.assign((static_cast<size_t>(trie.n_vocab()) + 63) / 64, 0);
    }
    auto allow = [&mask](int32_t id) { mask[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64); };
    const auto& stacks = sets_[static_cast<size_t>(state.set)];
    if (!stacks.empty() && stacks.front() == -1) {  // the grammar can end here
        for (const int32_t id : trie.end_tokens()) {
            if (id >= 0 && id < trie.n_vocab()) allow(id);
        }
    }
    if (top.least == 0) {
        for (size_t w = 0; w < mask.size(); ++w) mask[w] |= after[w] & table->break_at_start[w];
    }
    const State rest{top.rest, 0, 0, 0};
    for (int32_t b = 0; b < 256; ++b) {
        const int32_t lo = table->break_begin[static_cast<size_t>(b)],
                      hi = table->break_begin[static_cast<size_t>(b) + 1];
        if (lo == hi) continue;
        State first = rest;
        if (!step(first, static_cast<uint8_t>(b))) continue;  // what follows cannot start with this byte
        for (int32_t i = lo; i < hi; ++i) {
            const ClassRunTable::Break& br = table->breaks[static_cast<size_t>(i)];
            if (br.run < top.least || br.run > top.most) continue;
            const std::string& piece = trie.piece(br.id);
            State next = first;
            bool ok = true;
            for (size_t j = static_cast<size_t>(br.offset) + 1; j < piece.size() && ok; ++j)
                ok = step(next, static_cast<uint8_t>(piece[j]));
            if (ok) allow(br.id);
        }
    }
    for (const int32_t id : table->unfinished) {
        State next = state;
        bool ok = true;
        for (size_t j = 0; j < trie.piece(id).size() && ok; ++j)
            ok = step(next, static_cast<uint8_t>(trie.piece(id)[j]));
        if (ok) allow(id);
    }
    ++stats_.class_chain_masks;
    return true;
}

}  // namespace kvstash::grammar
