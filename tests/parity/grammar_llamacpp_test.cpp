// kvstash's grammar matcher against llama.cpp's: the accept/reject verdicts of
// tests/fixtures/grammar/llamacpp_accept.json (tests/reference/make_grammar_fixture.py: llama.cpp's
// grammar sampler fed the strings byte by byte) for llama.cpp's json, arithmetic and list grammars and
// a few small ones, on hand-written strings and random edits of them.
//
// One known difference, where llama.cpp is wrong: for a negated class, llama.cpp refuses the first byte
// of a multi-byte character when the range of characters that byte can start contains an excluded one
// (llama_grammar_match_partial_char), even when the character that follows is not excluded. The list
// grammar excludes U+2028 and U+2029, so llama.cpp refuses every character in U+2000..U+2FFF after
// "- " (e.g. the euro sign U+20AC); kvstash accepts them, as the grammar says. Such strings are checked
// to be exactly those: kvstash accepts, llama.cpp refused, and the text has a character in that range.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "grammar/gbnf_parse.h"
#include "grammar/grammar_matcher.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::grammar {
namespace {

// True when the UTF-8 text has a character in U+2000..U+2FFF (a 3-byte sequence with lead byte 0xE2).
bool has_u2000_block(const std::string& text) { return text.find('\xE2') != std::string::npos; }

TEST(GrammarLlamaCpp, SameVerdictsAsLlamaCpp) {
    const auto fixture = test::load_json(test::fixture_path("grammar/llamacpp_accept.json"));
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
    const auto trie = std::make_shared<TokenTrie>(pieces, std::vector<uint8_t>{}, std::vector<int32_t>{});
    size_t checked = 0, accepted = 0, known_differences = 0;
    for (const auto& c : fixture["cases"]) {
        const auto grammar = std::make_shared<ParsedGrammar>(parse_gbnf(c["grammar"].get<std::string>()));
        for (const auto& s : c["strings"]) {
            const std::string text = s["text"];
            GrammarMatcher m(grammar, trie);
            const bool got = m.accept_bytes(text) && m.can_end();
            const bool want = s["accepted"].get<bool>();
            if (got != want && c["name"] == "list" && got && has_u2000_block(text)) {
                ++known_differences;
                continue;
            }
            EXPECT_EQ(got, want) << c["name"] << ": '" << text << "'";
            ++checked;
            accepted += got;
        }
    }
    EXPECT_GE(checked, 300u);
    EXPECT_GE(accepted, 50u);
    EXPECT_LE(known_differences, 5u);
}

}  // namespace
}  // namespace kvstash::grammar
