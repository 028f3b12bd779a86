// Mask reuse (src/grammar/grammar_mask.cpp): collapsing counted repetitions, computing a mask from a
// base mask (by token length or by marker bytes), masks inside a repetition of one character class from
// its run table (class_chain_mask.cpp), and the process-wide shared cache must give bitwise the masks of
// the plain trie walk of every state (set_mask_reuse(false)), on random grammars with counted
// repetitions ({n}, {0,n}, {m,}, {m,n}, nested) and a random vocabulary with short and long tokens, and
// on SmolLM2's vocabulary.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "grammar/gbnf_parse.h"
#include "grammar/grammar_access.h"
#include "grammar/grammar_matcher.h"
#include "kvstash/error.h"
#include "kvstash/grammar.h"
#include "kvstash/model.h"
#include "kvstash/tokenizer.h"
#include "support/paths.h"

namespace kvstash::grammar {
namespace {

// Tokens: every single byte of the alphabet, random strings over it of 2..max_len bytes (some of them
// cut inside "é"), and an end token.
std::shared_ptr<const TokenTrie> random_trie(std::mt19937& rng, int n_tokens, int max_len) {
    static const std::vector<std::string> kAlphabet = {"a", "b", "-", " ", "\n", "\xc3\xa9", "\xc3", "\xa9", "1"};
    std::vector<std::string> pieces;
    for (const auto& a : kAlphabet) pieces.push_back(a);
    std::uniform_int_distribution<int> len(2, max_len), pick(0, static_cast<int>(kAlphabet.size()) - 1);
    while (static_cast<int>(pieces.size()) < n_tokens) {
        std::string s;
        const int n = len(rng);
        while (static_cast<int>(s.size()) < n) s += kAlphabet[static_cast<size_t>(pick(rng))];
        pieces.push_back(s);
    }
    pieces.push_back("</s>");
    const auto end = static_cast<int32_t>(pieces.size()) - 1;
    return std::make_shared<TokenTrie>(pieces, std::vector<uint8_t>{}, std::vector<int32_t>{end});
}

std::string random_item(std::mt19937& rng, int depth);

std::string random_repetition(std::mt19937& rng, int depth) {
    std::uniform_int_distribution<int> count(0, 24), kind(0, 4);
    // An item that cannot be empty (a repeated empty item makes stack sets blow up, plain walk or not).
    std::string item = "(";
    item.append(random_item(rng, depth + 1)).append(" [ab-])");
    int m = count(rng) / 3, n = count(rng);
    if (n < m) std::swap(m, n);
    switch (kind(rng)) {
        case 0: return item + "{0," + std::to_string(n) + "}";
        case 1: return item + "{" + std::to_string(m) + ",}";
        case 2: return item + "{" + std::to_string(n) + "}";
        default: return item + "{" + std::to_string(m) + "," + std::to_string(n) + "}";
    }
}

std::string random_item(std::mt19937& rng, int depth) {
    static const std::vector<std::string> kAtoms = {"\"a\"", "\"b\"",   "\"- \"", "[^\\n]", "[ab]",
                                                    ".",     "\"\\n\"", "\"é\"",  "[a-b1]", "\"ab\""};
    std::uniform_int_distribution<int> choice(0, depth >= 3 ? 0 : 5), atom(0, static_cast<int>(kAtoms.size()) - 1);
    switch (choice(rng)) {
        case 0: return kAtoms[static_cast<size_t>(atom(rng))];
        case 1: {
            std::string s = random_item(rng, depth + 1);
            return s.append(" ").append(random_item(rng, depth + 1));
        }
        case 2: {
            std::string s = "(";
            s.append(random_item(rng, depth + 1)).append(" | ").append(random_item(rng, depth + 1));
            return s.append(")");
        }
        default: return random_repetition(rng, depth);
    }
}

// Walks `steps` random allowed tokens, comparing the masks of a reusing matcher, a second reusing one
// (which finds the first one's masks in the shared cache) and the plain one at every step.
void compare_masks(const std::string& gbnf, const std::shared_ptr<const TokenTrie>& trie, std::mt19937& rng, int steps,
                   GrammarMatcher::MaskStats* stats = nullptr, GrammarMatcher::MaskStats* second_stats = nullptr) {
    auto parsed = std::make_shared<ParsedGrammar>(parse_gbnf(gbnf));
    for (int pass = 0; pass < 2; ++pass) {
        GrammarMatcher fast(parsed, trie);
        GrammarMatcher plain(parsed, trie);
        plain.set_mask_reuse(false);
        for (int step = 0; step < steps; ++step) {
            const auto& expected = plain.allowed_tokens();
            ASSERT_EQ(fast.allowed_tokens(), expected) << gbnf << "\npass " << pass << ", step " << step;
            for (int32_t id = 0; id < trie->n_vocab(); ++id) {  // one token's bit without the mask
                ASSERT_EQ(fast.is_allowed(id), ((expected[static_cast<size_t>(id) / 64] >> (id % 64)) & 1) != 0)
                    << gbnf << "\npass " << pass << ", step " << step << ", token " << id;
            }
            std::vector<int32_t> allowed;  // the end token only when nothing else may come (long walks)
            for (int32_t id = 0; id < trie->n_vocab(); ++id) {
                if ((expected[static_cast<size_t>(id) / 64] >> (id % 64)) & 1 && !trie->is_end_token(id))
                    allowed.push_back(id);
            }
            if (allowed.empty() && plain.can_end()) allowed.push_back(trie->end_tokens().front());
            if (allowed.empty() || plain.must_end()) break;
            const int32_t token = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
            plain.accept_token(token);
            fast.accept_token(token);
            if (trie->is_end_token(token)) break;
        }
        if (stats != nullptr && pass == 0) *stats = fast.mask_stats();
        if (second_stats != nullptr && pass == 1) *second_stats = fast.mask_stats();
    }
}

TEST(GrammarMaskReuse, RandomCountedRepetitionsGiveThePlainWalksMasks) {
    std::mt19937 rng(18);
    int grammars = 0;
    for (int round = 0; round < 150; ++round) {
        const auto trie = random_trie(rng, 160, round % 2 == 0 ? 4 : 9);
        std::string gbnf = "root ::= ";
        gbnf.append(random_item(rng, 0));
        try {
            parse_gbnf(gbnf);
        } catch (const Error&) {
            continue;  // left recursion (a repeated item that can be empty)
        }
        ++grammars;
        if (std::getenv("KVSTASH_TEST_VERBOSE")) std::fprintf(stderr, "%d %s\n", round, gbnf.c_str());
        compare_masks(gbnf, trie, rng, 40);
        if (HasFatalFailure()) return;
    }
    EXPECT_GT(grammars, 60);
}

// States that loop on most ASCII bytes (free text, a JSON string): trie subtrees whose every byte leads
// back to the state are allowed whole; the masks must still be the plain walk's.
TEST(GrammarMaskReuse, ClosedSubtreesGiveThePlainWalksMasks) {
    const std::vector<std::string> grammars = {
        "root ::= [^\\n]* \"\\n\"",
        "root ::= (\"\\\"\" [^\"\\\\]* \"\\\"\" [ ]?)+",
        "root ::= [ab -]* (\"1\" [ab]*)* \"\\n\"?",
        "root ::= ([a-b ]* \"é\")+ | [^a]+",
    };
    std::mt19937 rng(11);
    size_t closed = 0;
    for (int round = 0; round < 16; ++round) {
        const auto trie = random_trie(rng, 1500, 2 + round % 7);
        GrammarMatcher::MaskStats stats;
        compare_masks(grammars[static_cast<size_t>(round) % grammars.size()], trie, rng, 40, &stats);
        if (HasFatalFailure()) return;
        closed += stats.closed_subtrees;
    }
    EXPECT_GT(closed, 100u);  // the shortcut was taken
}

TEST(GrammarMaskReuse, BoundedListCollapsesCountsAndPrunesTheWalk) {
    std::mt19937 rng(7);
    const auto trie = random_trie(rng, 300, 16);  // longest token 16 bytes: counts above 20 collapse
    GrammarMatcher::MaskStats stats, second;
    compare_masks("root ::= (\"- \" [^\\n]{1,60} \"\\n\"){1,8}", trie, rng, 120, &stats, &second);
    // Without reuse every step of a line is a new state; with it most states share a mask or are a
    // walk of the few long tokens.
    EXPECT_LT(stats.full_walks, 40u);
    EXPECT_GT(stats.pruned_walks, 0u);
    EXPECT_GT(second.shared_hits, 0u);  // the second matcher of the same grammar finds the first one's masks
    std::printf("full walks %zu, pruned walks %zu, shared hits %zu\n", stats.full_walks, stats.pruned_walks,
                stats.shared_hits);
}

TEST(GrammarMaskReuse, NestedAndUnicodeRepetitions) {
    std::mt19937 rng(3);
    const auto trie = random_trie(rng, 400, 12);
    for (const char* gbnf :
         {"root ::= (\"ab-\" [ab]{0,3} \"\\n\"){0,20}", "root ::= (\"a\" [ab1]{1,2} \"-\"){2,30}",
          "root ::= ((\"a\" [^\\n]{0,12} \"\\n\"){2,9} \"-\"){0,3}", "root ::= (\"é\"{0,20} [ab]{3,30}){1,4} \"\\n\"",
          "root ::= \"x\"? ([^\\n]{10,} | \"-\"{0,40}) \"\\n\"", "root ::= (. (\"a\"{0,15} | \"b\"{2,16})){0,12}"}) {
        compare_masks(gbnf, trie, rng, 80);
        if (HasFatalFailure()) return;
    }
}

// Repetitions of one character class (the run-table masks), with small and large counts, followed by
// what can or cannot start with a class character (the table is used only when it cannot), inside
// counted repetitions of lines (markers).
std::string random_class_repetition(std::mt19937& rng) {
    static const std::vector<std::string> kClasses = {"[^\\n]", "[ab]",  "[a-b ]", ".",
                                                      "[^a]",   "\"é\"", "[ab1-]", "[^\\n-]"};
    static const std::vector<std::string> kFollowers = {
        "\"\\n\"", "\"-\"", "[ab]", "\"1\"", "", "\" \" [^\\n]{0,3}", "(\"\\n\" | \"1-\")", "\"é\""};
    auto pick = [&rng](const std::vector<std::string>& v) {
        return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
    };
    std::uniform_int_distribution<int> small(0, 4), large(0, 40), coin(0, 1);
    const int m = coin(rng) ? small(rng) : large(rng) / 2;
    const int n = m + (coin(rng) ? small(rng) : large(rng));
    std::string item = (coin(rng) ? "\"-\" " : "") + pick(kClasses) + "{" + std::to_string(m) + "," +
                       std::to_string(std::max(n, 1)) + "} " + pick(kFollowers);
    switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
        case 0: return item;
        case 1: return "(" + item + " \"\\n\"){1," + std::to_string(1 + small(rng) * 3) + "}";
        case 2:
            return "(" + item + " \"\\n\"){" + std::to_string(small(rng)) + "," + std::to_string(5 + large(rng)) + "}";
        default: return "(" + item + " | \"ab\" [^\\n]{0," + std::to_string(large(rng)) + "})+";
    }
}

TEST(GrammarMaskReuse, RandomClassRepetitionsGiveThePlainWalksMasks) {
    std::mt19937 rng(1811);
    int grammars = 0;
    size_t from_tables = 0;
    for (int round = 0; round < 120; ++round) {
        const auto trie = random_trie(rng, 200, round % 3 == 0 ? 4 : 12);
        const std::string gbnf = "root ::= " + random_class_repetition(rng);
        try {
            parse_gbnf(gbnf);
        } catch (const Error&) {
            continue;  // a repeated item that can be empty
        }
        ++grammars;
        if (std::getenv("KVSTASH_TEST_VERBOSE")) std::fprintf(stderr, "%d %s\n", round, gbnf.c_str());
        GrammarMatcher::MaskStats stats;
        compare_masks(gbnf, trie, rng, 60, &stats);
        if (HasFatalFailure()) return;
        from_tables += stats.class_chain_masks;
    }
    EXPECT_GT(grammars, 80);
    EXPECT_GT(from_tables, 100u);  // the run tables were used
}

// x{m,n} with a large m: m copies of the class, each step a new state that does not collapse; the run
// table covers the copies too (least = copies left), so no step walks the trie.
TEST(GrammarMaskReuse, LargeMinimumOfOneClassTakesTheRunTable) {
    std::mt19937 rng(4);
    const auto trie = random_trie(rng, 400, 10);
    for (const char* gbnf : {"root ::= [a-b ]{30,45} \"\\n\"", "root ::= \"-\" [^\\n]{25} \"\\n\" [ab]{0,3}"}) {
        GrammarMatcher::MaskStats stats;
        compare_masks(gbnf, trie, rng, 40, &stats);
        if (HasFatalFailure()) return;
        EXPECT_GE(stats.class_chain_masks, 3u) << gbnf;
        EXPECT_GT(stats.class_chain_masks, stats.full_walks) << gbnf;
        EXPECT_LE(stats.full_walks, 3u) << gbnf;
        std::printf("%s: %zu masks from the run table, %zu full walks\n", gbnf, stats.class_chain_masks,
                    stats.full_walks);
    }
}

// Dropping the caches (a long generation past the node / set limits) renumbers sets and nodes: the run
// shapes cached by set id are dropped with them, the class tables (by grammar position) kept.
TEST(GrammarMaskReuse, CacheRebuildKeepsTheRunTableMasks) {
    std::mt19937 rng(6);
    const auto trie = random_trie(rng, 300, 9);
    auto parsed = std::make_shared<ParsedGrammar>(parse_gbnf("root ::= (\"- \" [^\\n]{1,30} \"\\n\"){1,12}"));
    GrammarMatcher fast(parsed, trie), plain(parsed, trie);
    fast.set_cache_limits(64, 24);
    plain.set_mask_reuse(false);
    for (int step = 0; step < 120 && !plain.must_end(); ++step) {
        const auto& expected = plain.allowed_tokens();
        ASSERT_EQ(fast.allowed_tokens(), expected) << "step " << step;
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < trie->n_vocab(); ++id) {
            if ((expected[static_cast<size_t>(id) / 64] >> (id % 64)) & 1 && !trie->is_end_token(id))
                allowed.push_back(id);
        }
        if (allowed.empty()) break;
        const int32_t token = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        plain.accept_token(token);
        fast.accept_token(token);
    }
    EXPECT_GT(fast.mask_stats().class_chain_masks, 10u);
}

// The marker bound at its edge: item "a\nb" with marker "\n" (the rarest of its characters here); after
// "a\n" the rest of the item holds no marker, so a token "b" ("a\nb") x (k - 1) "a" holds k - 1 markers and
// needs k copies: allowed with k copies left, not with fewer. One more marker in the budget would allow
// it too early.
TEST(GrammarMaskReuse, MarkerBoundAtItsEdge) {
    std::vector<std::string> pieces = {"a", "b", "\n", "aa", "bb", "ab", "ba", "aab", "bba", "abab"};
    for (int j = 0; j <= 6; ++j) {
        std::string piece = "b";
        for (int c = 0; c < j; ++c) piece += "a\nb";
        pieces.push_back(piece + "a");
        pieces.push_back(piece);
    }
    pieces.push_back("</s>");
    const auto trie = std::make_shared<TokenTrie>(pieces, std::vector<uint8_t>{},
                                                  std::vector<int32_t>{static_cast<int32_t>(pieces.size()) - 1});
    std::mt19937 rng(2);
    for (const char* gbnf : {"root ::= (\"a\\nb\"){1,9}", "root ::= (\"a\\nb\"){0,12} \"a\""}) {
        auto parsed = std::make_shared<ParsedGrammar>(parse_gbnf(gbnf));
        GrammarMatcher fast(parsed, trie), plain(parsed, trie);
        plain.set_mask_reuse(false);
        for (int step = 0; step < 40 && !plain.must_end(); ++step) {
            ASSERT_EQ(fast.allowed_tokens(), plain.allowed_tokens()) << gbnf << "\nstep " << step;
            const char* next = step % 3 == 0 ? "a" : step % 3 == 1 ? "\n" : "b";
            if (!plain.accept_bytes(next)) break;
            ASSERT_TRUE(fast.accept_bytes(next));
        }
        EXPECT_GT(fast.mask_stats().pruned_walks, 0u) << gbnf;
    }
}

// The real vocabulary (49,152 tokens, up to 81 bytes, byte-level pieces cut inside characters): the bench's
// list and CSV grammars and class repetitions, each state's mask against the plain walk's along text
// the model might write.
TEST(GrammarMaskReuse, SmolLM2VocabularyGivesThePlainWalksMasks) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto model = Model::load(test::default_model_path());
    const auto vocabulary = GrammarVocabulary::build(model->tokenizer());
    const auto trie = GrammarAccess::trie(*vocabulary);
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"root ::= (\"- \" [^\\n]{1,60} \"\\n\"){1,8}",
         "- Name: John Smith\n- Age: 32 years\n- City: New York, USA\n- Pets: a dog named Max\n- Born: 1991-04-12\n"},
        {"root ::= \"name,age,city\\n\" row{1,6}\nrow ::= field \",\" [0-9]{1,3} \",\" field \"\\n\"\n"
         "field ::= [A-Za-z] [A-Za-z .'-]{0,30}",
         "name,age,city\nJohn Smith,32,New York\nAlice O'Hara,27,London\nMarie-Claire Dupont,38,Lyon\nBob,4,Rome\n"},
        {"root ::= \"x\" [^\\n]{0,6} (\"\\n\" [a-z ]{2,12}){0,3} \".\"", "xabc déf\nhello you\nab."},
        {"root ::= (. (\"a\"{0,15} | \"b\"{2,16})){0,12} [^é]{0,40}", "xaaayaaaaazbbbé héllo wörld"},
    };
    size_t from_tables = 0;
    for (const auto& [gbnf, text] : cases) {
        auto parsed = std::make_shared<ParsedGrammar>(parse_gbnf(gbnf));
        kvstash::clear_grammar_mask_cache();
        GrammarMatcher fast(parsed, trie), plain(parsed, trie);
        plain.set_mask_reuse(false);
        const std::vector<int32_t> tokens = model->tokenizer().encode(text, AddSpecial::no, ParseSpecial::no);
        for (size_t i = 0; i < tokens.size(); ++i) {
            ASSERT_EQ(fast.allowed_tokens(), plain.allowed_tokens()) << gbnf << "\nstep " << i;
            if (!plain.is_allowed(tokens[i])) break;  // the text left the grammar (the tokenizer's split)
            plain.accept_token(tokens[i]);
            fast.accept_token(tokens[i]);
        }
        from_tables += fast.mask_stats().class_chain_masks;
    }
    EXPECT_GT(from_tables, 30u);
}

TEST(GrammarMaskReuse, SharedCacheIsBoundedAndCanBeDisabled) {
    std::mt19937 rng(5);
    const auto trie = random_trie(rng, 200, 5);
    const size_t saved = kvstash::grammar_mask_cache_stats().capacity;
    kvstash::clear_grammar_mask_cache();
    kvstash::set_grammar_mask_cache_capacity(4096);  // a few masks
    compare_masks("root ::= ([ab]{0,30} \"\\n\"){1,5}", trie, rng, 60);
    EXPECT_LE(kvstash::grammar_mask_cache_stats().bytes, 4096u);
    kvstash::set_grammar_mask_cache_capacity(0);
    EXPECT_EQ(kvstash::grammar_mask_cache_stats().entries, 0u);
    compare_masks("root ::= ([ab]{0,30} \"\\n\"){1,5}", trie, rng, 60);
    kvstash::set_grammar_mask_cache_capacity(saved);
}

TEST(GrammarMaskReuse, MatchersInParallelThreadsShareTheCache) {
    std::mt19937 rng(11);
    const auto trie = random_trie(rng, 300, 10);
    const std::string gbnf = "root ::= (\"- \" [^\\n]{1,40} \"\\n\"){1,6}";
    std::vector<std::thread> threads;
    std::vector<int> failures(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937 local(static_cast<uint32_t>(t));
            compare_masks(gbnf, trie, local, 80);
            failures[static_cast<size_t>(t)] = ::testing::Test::HasFailure() ? 1 : 0;
        });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(failures, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace kvstash::grammar
