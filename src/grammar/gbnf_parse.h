// GBNF (llama.cpp's grammar syntax) -> a flat rule table the matcher walks.
//
//   root   ::= object                      # a rule: name ::= alternatives (one line, or more inside ( ))
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= [a-z]+ ":" ws value | "x" [^"\\\x00-\x1f] . {2,4}
//
// Syntax: rule names [A-Za-z0-9_-]+; "literal" strings; [...] character classes with ranges a-z and ^
// negation; . any character; ( ) groups; postfix * + ? {m} {m,} {m,n}; # comments to the end of the
// line; escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH. A rule ends at a newline unless the
// newline is inside ( ) or follows a '|'. Terminals are Unicode code points (the input is UTF-8).
//
// Repetitions and groups become generated rules (x* => R ::= x R | empty), as llama.cpp does, so the
// matcher only sees sequences of characters and rule references.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/grammar.h"

namespace kvstash::grammar {

enum class ElementType : uint8_t {
    end,              // end of a rule's last alternative
    alt,              // end of an alternative; the next one starts after it
    rule_ref,         // value: rule id
    chr,              // a character class starts; value: a code point (or a range's lower end)
    chr_not,          // a negated class starts; value as chr
    chr_range_upper,  // value: upper end of a range whose lower end is the previous element
    chr_alt,          // value: one more code point (or range start) of the class
    chr_any,          // '.': any code point
};

struct Element {
    ElementType type = ElementType::end;
    uint32_t value = 0;
};

struct ParsedGrammar {
    // Every rule's elements, concatenated: rule r is elements[rule_start[r] .. its `end`]. Positions in
    // this array are what the matcher's stacks hold.
    std::vector<Element> elements;
    std::vector<int32_t> rule_start;
    std::vector<std::string> rule_names;  // generated rules: "<name>_<n>"
    int32_t root = -1;
    // Counted repetitions: x{m,n} is m copies of x then R_(n-m), where R_k ::= x R_(k-1) | (empty) and
    // R_1 ::= x | (empty) (each R_k has the same elements as every other but the reference), so R_k is
    // "at most k more x". repeat_chains[c][k - 1]: the rule id of R_k of chain c; rule_chain[r] = c and
    // rule_count[r] = k for R_k (-1 and 0 for other rules). The matcher uses it to share masks between
    // states that differ only in a count (grammar_matcher.h).
    std::vector<std::vector<int32_t>> repeat_chains;
    std::vector<int32_t> rule_chain;
    std::vector<int32_t> rule_count;
};

// Parses GBNF text. The start rule is `root`. Throws Error(invalid_argument) with "line L, column C: "
// and what was expected for a syntax error; naming the rule for an undefined reference, a missing
// root or left recursion (a rule that can reach itself before consuming a character, which a
// top-down matcher cannot run: rewrite `a ::= a "x" | "y"` as `a ::= "y" "x"*`; a `x*` whose x can be
// empty is the same thing).
// Past `limits` (kvstash/grammar.h: group depth, expanded elements): Error(invalid_argument) naming
// the limit; past its deadline: PreparationExpired.
ParsedGrammar parse_gbnf(std::string_view text, const GrammarLimits& limits = {});

// True when code point `c` is in the class starting at elements[pos] (chr, chr_not or chr_any).
bool class_matches(const std::vector<Element>& elements, int32_t pos, uint32_t c);
// The position after the class starting at elements[pos].
int32_t class_end(const std::vector<Element>& elements, int32_t pos);
// True when some code point in [lo, hi] is in the class starting at elements[pos].
bool class_intersects(const std::vector<Element>& elements, int32_t pos, uint32_t lo, uint32_t hi);

}  // namespace kvstash::grammar
