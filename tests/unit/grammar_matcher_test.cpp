// The grammar matcher: accept/reject of strings under small grammars and llama.cpp's json / arithmetic
// / list grammars (expected verdicts written from the grammars by hand), and the token mask (a token is
// allowed iff all its bytes can be consumed; end tokens iff the grammar can end) against a brute-force
// check of every token.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/gbnf_parse.h"
#include "grammar/grammar_matcher.h"
#include "kvstash/error.h"

namespace kvstash::grammar {
namespace {

// llama.cpp's example grammars (llama-cpp-python 0.3.36, llama_cpp/llama_grammar.py: JSON_GBNF,
// ARITHMETIC_GBNF, LIST_GBNF).
namespace test_grammars {

inline constexpr const char* kJson = R"gbnf(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)gbnf";

inline constexpr const char* kArithmetic = R"gbnf(root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)gbnf";

inline constexpr const char* kList = R"gbnf(root ::= item+

# Excludes various line break characters
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
)gbnf";

}  // namespace test_grammars

// Token i < 256: the byte i; 256: the end token; then a few multi-byte tokens.
std::shared_ptr<const TokenTrie> byte_trie(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
    pieces.push_back("</s>");
    for (const auto& e : extra) pieces.push_back(e);
    return std::make_shared<TokenTrie>(pieces, std::vector<uint8_t>{}, std::vector<int32_t>{256});
}

bool accepts(const std::string& gbnf, const std::string& text) {
    GrammarMatcher m(std::make_shared<ParsedGrammar>(parse_gbnf(gbnf)), byte_trie());
    return m.accept_bytes(text) && m.can_end();
}

TEST(GrammarMatcher, SmallGrammars) {
    EXPECT_TRUE(accepts("root ::= \"ab\" | \"c\"", "ab"));
    EXPECT_TRUE(accepts("root ::= \"ab\" | \"c\"", "c"));
    EXPECT_FALSE(accepts("root ::= \"ab\" | \"c\"", "a"));
    EXPECT_FALSE(accepts("root ::= \"ab\" | \"c\"", "abc"));
    EXPECT_TRUE(accepts("root ::= [a-c]+ \"!\"?", "abca!"));
    EXPECT_FALSE(accepts("root ::= [a-c]+ \"!\"?", "!"));
    EXPECT_TRUE(accepts("root ::= \"x\"{2,3}", "xx"));
    EXPECT_TRUE(accepts("root ::= \"x\"{2,3}", "xxx"));
    EXPECT_FALSE(accepts("root ::= \"x\"{2,3}", "x"));
    EXPECT_FALSE(accepts("root ::= \"x\"{2,3}", "xxxx"));
    EXPECT_TRUE(accepts("root ::= \"x\"{2,}", "xxxxxx"));
    EXPECT_TRUE(accepts("root ::= \"x\"{0}", ""));
    EXPECT_TRUE(accepts("root ::= [^a] .", "ba"));
    EXPECT_FALSE(accepts("root ::= [^a] .", "ab"));
    EXPECT_TRUE(accepts("root ::= \"é\" [一-龥]", "é中"));
    EXPECT_FALSE(accepts("root ::= \"é\" [一-龥]", "éa"));
    EXPECT_FALSE(accepts("root ::= .", "\xff"));                 // not UTF-8
    EXPECT_FALSE(accepts("root ::= \"a\"", "\xc1\xa1"));         // overlong 'a'
    EXPECT_FALSE(accepts("root ::= \"a\"", "\xe0\x81\xa1"));     // overlong 'a'
    EXPECT_FALSE(accepts("root ::= [^a]", "\xed\xa0\x80"));      // a surrogate
    EXPECT_FALSE(accepts("root ::= [^a]", "\xf4\x90\x80\x80"));  // past U+10FFFF
    EXPECT_TRUE(accepts("root ::= [^a]", "\xf4\x8f\xbf\xbf"));   // U+10FFFF
    EXPECT_TRUE(accepts("root ::= (\"a\" | \"b\" root)", "bbba"));
    EXPECT_TRUE(accepts("root ::= \"\" | \"a\"", ""));
}

TEST(GrammarMatcher, LlamaCppJsonGrammar) {
    const std::string g = test_grammars::kJson;
    EXPECT_TRUE(accepts(g, "{}"));
    EXPECT_TRUE(accepts(g, "{\"a\": [1, 2.5e3, -0, \"x\\n\\u00e9\", true, null, {}]}"));
    EXPECT_TRUE(accepts(g, "{\n  \"k\": \"v\"\n}"));
    EXPECT_FALSE(accepts(g, "[]"));  // root is an object
    EXPECT_FALSE(accepts(g, "{\"a\" 1}"));
    EXPECT_FALSE(accepts(g, "{\"a\": 01}"));
    EXPECT_FALSE(accepts(g, "{\"a\": \"\x01\"}"));
    EXPECT_FALSE(accepts(g, "{\"a\": 1"));
    EXPECT_FALSE(accepts(g, "{\"a\": 1,}"));
}

TEST(GrammarMatcher, LlamaCppArithmeticAndListGrammars) {
    EXPECT_TRUE(accepts(test_grammars::kArithmetic, "x+1 = 2\n"));
    EXPECT_TRUE(accepts(test_grammars::kArithmetic, "(ab1*3)/y = z\nz=1\n"));
    EXPECT_FALSE(accepts(test_grammars::kArithmetic, "x = 1+\n"));
    EXPECT_FALSE(accepts(test_grammars::kArithmetic, "x = 1+2\n"));  // one term after '='
    EXPECT_FALSE(accepts(test_grammars::kArithmetic, "1x = 2\n"));
    EXPECT_TRUE(accepts(test_grammars::kList, "- a\n- bc d\n"));
    EXPECT_FALSE(accepts(test_grammars::kList, "- \n"));
    EXPECT_FALSE(accepts(test_grammars::kList, "-a\n"));
    EXPECT_FALSE(accepts(test_grammars::kList, "- a\u2028b\n"));
}

TEST(GrammarMatcher, RejectedBytesLeaveTheStateAlone) {
    GrammarMatcher m(std::make_shared<ParsedGrammar>(parse_gbnf("root ::= \"abc\"")), byte_trie());
    EXPECT_TRUE(m.accept_bytes("a"));
    EXPECT_FALSE(m.accept_bytes("bx"));
    EXPECT_FALSE(m.can_end());
    EXPECT_TRUE(m.accept_bytes("bc"));
    EXPECT_TRUE(m.must_end());
}

// The mask against a brute force: token t allowed iff a fresh matcher in the same state accepts its
// piece (partial UTF-8 at the end allowed when some completion could match), end token iff can_end.
void check_mask_by_brute_force(const std::string& gbnf, const std::vector<std::string>& extra, uint32_t seed) {
    const auto grammar = std::make_shared<ParsedGrammar>(parse_gbnf(gbnf));
    const auto trie = byte_trie(extra);
    GrammarMatcher m(grammar, trie);
    std::string prefix;
    std::mt19937 rng(seed);
    for (int step = 0; step < 40; ++step) {
        const std::vector<uint64_t> mask = m.allowed_tokens();
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < trie->n_vocab(); ++t) {
            const bool got = (mask[t / 64] >> (t % 64)) & 1;
            bool want;
            GrammarMatcher fresh(grammar, trie);
            ASSERT_TRUE(fresh.accept_bytes(prefix));
            if (t == 256) {
                want = fresh.can_end();
            } else {
                want = fresh.accept_bytes(trie->piece(t));
            }
            EXPECT_EQ(got, want) << "token " << t << " after '" << prefix << "'";
            if (got) allowed.push_back(t);
        }
        if (allowed.empty() || m.must_end()) break;
        const int32_t t = allowed[rng() % allowed.size()];
        if (t == 256) break;
        m.accept_token(t);
        prefix += trie->piece(t);
    }
}

TEST(GrammarMatcher, MaskEqualsBruteForce) {
    const std::vector<std::string> extra = {"{\"",      "\": ", "\\u00", "true", "tr", "\xc3", "\xc3\xa9",
                                            "\xe4\xb8", "\"}",  "12",    ", \"", "[1", "é!",   "\xe2\x80"};
    for (uint32_t seed = 0; seed < 4; ++seed) {
        check_mask_by_brute_force(test_grammars::kJson, extra, seed);
        check_mask_by_brute_force(test_grammars::kList, extra, seed);
    }
}

TEST(GrammarMatcher, NoTokenStartsAnOverlongForm) {
    // 0xC1 0xA1 would be an overlong 'a'; 0xE0 0x81 0xA1 too: neither lead byte may start "a".
    GrammarMatcher m(std::make_shared<ParsedGrammar>(parse_gbnf("root ::= \"a\" | \"é\"")), byte_trie());
    EXPECT_TRUE(m.is_allowed('a'));
    EXPECT_TRUE(m.is_allowed(0xC3));
    EXPECT_FALSE(m.is_allowed(0xC1));
    EXPECT_FALSE(m.is_allowed(0xE0));
    EXPECT_FALSE(m.is_allowed(0xF0));
}

TEST(GrammarMatcher, CacheRebuildKeepsTheSameMasks) {
    // Tiny cache limits: the matcher rebuilds its tables from the current stacks nearly every step; its
    // masks and verdicts stay those of a matcher that never does.
    const auto grammar = std::make_shared<ParsedGrammar>(parse_gbnf(test_grammars::kJson));
    const auto trie = byte_trie({"{\"", "\": ", "[1", ", \"", "\"}", "]}"});
    GrammarMatcher small(grammar, trie), plain(grammar, trie);
    small.set_cache_limits(64, 16);
    const std::string doc = "{\"a\": [1, {\"b\": [[2, \"x\"], null]}, true], \"c\": {\"d\": \"é\"}}";
    for (const char ch : doc) {
        ASSERT_EQ(small.allowed_tokens(), plain.allowed_tokens()) << "before '" << ch << "'";
        ASSERT_TRUE(small.accept_bytes(std::string(1, ch)));
        ASSERT_TRUE(plain.accept_bytes(std::string(1, ch)));
    }
    EXPECT_EQ(small.allowed_tokens(), plain.allowed_tokens());
    EXPECT_TRUE(small.can_end());
}

TEST(GrammarMatcher, EndTokenOnlyWhenComplete) {
    GrammarMatcher m(std::make_shared<ParsedGrammar>(parse_gbnf("root ::= \"ab\"")), byte_trie({"ab"}));
    EXPECT_FALSE(m.is_allowed(256));
    EXPECT_TRUE(m.is_allowed(257));
    EXPECT_THROW(m.accept_token('b'), Error);
    m.accept_token(257);
    EXPECT_TRUE(m.is_allowed(256));
    EXPECT_FALSE(m.is_allowed('a'));
    m.accept_token(256);
    EXPECT_TRUE(m.must_end());
}

}  // namespace
}  // namespace kvstash::grammar
