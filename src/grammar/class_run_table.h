// What a repetition of one character class, [^\n]{0,60} or [A-Za-z .'-]{0,30}, allows of a vocabulary:
// per token, how many leading characters are in the class and where the first one that is not starts.
// Built once per (vocabulary, class) and shared (class_chain_mask.cpp); the matcher's masks for every
// count of the repetition and every context after it come from this table (grammar_matcher.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/gbnf_parse.h"

namespace kvstash::grammar {

class TokenTrie;

struct ClassRunTable {
    // "In the class": the first character in the first class, later ones in the tail class.
    // Tokens made only of whole characters in the class, of at most n characters (code points):
    // in_class_upto[min(n, size - 1)], bit id (word id / 64). A state's mask starts as a copy of one.
    std::vector<std::vector<uint64_t>> in_class_upto;
    // Tokens with a character outside the class (or not valid UTF-8) after `run` characters in it, that
    // one starting at byte `offset`; ordered by that byte: byte b's are breaks[break_begin[b] .. [b + 1]).
    struct Break {
        int32_t id = 0;
        int32_t offset = 0;
        int32_t run = 0;
    };
    std::vector<Break> breaks;  // run >= 1 only
    std::array<int32_t, 257> break_begin{};
    // Tokens whose first character is outside the first class (run 0): bit id (word id / 64). Where the
    // run may end at once, they are allowed exactly where the set after the run allows them.
    std::vector<uint64_t> break_at_start;
    // Tokens that end inside a character after only characters in the class: stepped whole.
    std::vector<int32_t> unfinished;
};

// The table of a run whose first character is in the class starting at elements[first] and every later
// one in the class at elements[tail] (the same class, or [A-Za-z] then [A-Za-z .'-]{0,30}), from the
// process-wide cache (built on first use; dropped by clear_grammar_mask_cache(), so a cold request pays
// for it).
std::shared_ptr<const ClassRunTable> class_run_table(const TokenTrie& trie, const std::vector<Element>& elements,
                                                     int32_t first, int32_t tail);
void clear_class_run_tables();

}  // namespace kvstash::grammar
