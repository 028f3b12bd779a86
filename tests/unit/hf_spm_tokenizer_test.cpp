// The rank-driven merge of a SentencePiece-style tokenizer.json (tokenization::HfBpeEncoder, Vocabulary::
// hf_merge_by_rank) on a hand-made vocabulary, against llama.cpp's score-driven SentencePiece merge of the same
// tokens. The whole pipeline against Hugging Face tokenizers: tests/parity/hf_spm_tokenizer_test.cpp.
#include <gtest/gtest.h>

#include <cstdio>

#include "kvstash/error.h"
#include "kvstash/tokenizer.h"
#include "tokenizer/tokenizer_access.h"
#include "tokenizer/vocabulary.h"

namespace kvstash {
namespace {

using Ids = std::vector<int32_t>;

// <unk>, <s>, 256 byte tokens (ids 2..257), then a b c ab bc abc (258..263). Merges: "b c" (rank 0), "a b" (1),
// "ab c" (2): no merge joins "a" and "bc". Scores -1 - the rank of the merge making the token, as vocabulary_hf
// writes them.
Vocabulary abc_vocabulary() {
    Vocabulary v;
    v.model = "llama";
    const auto add = [&](const std::string& text, TokenType type, float score) {
        v.tokens.push_back(text);
        v.token_types.push_back(static_cast<int32_t>(type));
        v.scores.push_back(score);
    };
    add("<unk>", TokenType::unknown, 0);
    add("<s>", TokenType::control, 0);
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        add(name, TokenType::byte, 0);
    }
    for (const char* t : {"a", "b", "c"}) add(t, TokenType::normal, 0);
    add("ab", TokenType::normal, -2);
    add("bc", TokenType::normal, -1);
    add("abc", TokenType::normal, -3);
    v.merges = {"b c", "a b", "ab c"};
    v.unk_id = 0;
    v.bos_id = 1;
    v.hf_merge_by_rank = true;
    return v;
}

constexpr int32_t kA = 258, kB = 259, kC = 260, kAB = 261, kBC = 262, kABC = 263;

TEST(HfBpeEncoder, MergesOnlyListedPairsByRank) {
    const Tokenizer tok = make_tokenizer(abc_vocabulary());
    // "b c" (rank 0) first: a bc; no merge joins them, so tokenizers stops there.
    EXPECT_EQ(tok.encode("abc", AddSpecial::no, ParseSpecial::no), (Ids{kA, kBC}));
    // "a b" then "ab c".
    EXPECT_EQ(tok.encode("abac", AddSpecial::no, ParseSpecial::no), (Ids{kAB, kA, kC}));
    EXPECT_EQ(tok.encode("ab c", AddSpecial::no, ParseSpecial::no), (Ids{kAB, 2 + 0xE2, 2 + 0x96, 2 + 0x81, kC}));
    // A character that is no token becomes its bytes (byte fallback), which no merge joins.
    EXPECT_EQ(tok.encode("b\xC3\xA9", AddSpecial::no, ParseSpecial::no), (Ids{kB, 2 + 0xC3, 2 + 0xA9}));
    EXPECT_EQ(tok.decode(tok.encode("b\xC3\xA9"
                                    "abc",
                                    AddSpecial::no, ParseSpecial::no)),
              "b\xC3\xA9"
              "abc");
    // Score-driven (llama.cpp's SentencePiece): bc (-1) first, then a+bc = abc is a token, so it merges.
    Vocabulary by_score = abc_vocabulary();
    by_score.hf_merge_by_rank = false;
    EXPECT_EQ(make_tokenizer(by_score).encode("abc", AddSpecial::no, ParseSpecial::no), (Ids{kABC}));
}

TEST(HfBpeEncoder, MalformedMergeIsRefused) {
    for (const char* merge : {"a", "a b c", "a zz", "c a"}) {
        SCOPED_TRACE(merge);
        Vocabulary v = abc_vocabulary();
        v.merges.push_back(merge);
        try {
            make_tokenizer(v);
            ADD_FAILURE() << "expected an error";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::bad_format) << e.what();
        }
    }
}

// Metaspace "first" puts '▁' only before the text's first piece, and not when it already starts with a space;
// the Strip decoder takes one space off the start of the output only.
TEST(HfBpeEncoder, MetaspacePrefixAndStrip) {
    Vocabulary v = abc_vocabulary();
    for (const char* t : {"\xE2\x96\x81", "b\xE2\x96\x81"}) {  // 264 '▁', 265 'b▁'
        v.tokens.push_back(t);
        v.token_types.push_back(static_cast<int32_t>(TokenType::normal));
        v.scores.push_back(0);
    }
    v.merges.push_back("b \xE2\x96\x81");
    v.add_space_prefix = true;
    v.hf_metaspace = "first";
    v.hf_decode_strip_space = true;
    const Tokenizer tok = make_tokenizer(v);
    EXPECT_EQ(tok.encode("a", AddSpecial::no, ParseSpecial::yes), (Ids{264, kA}));
    EXPECT_EQ(tok.encode(" a", AddSpecial::no, ParseSpecial::yes), (Ids{264, kA}));
    EXPECT_EQ(tok.encode("<s>a", AddSpecial::no, ParseSpecial::yes), (Ids{1, kA}));
    EXPECT_EQ(tok.encode("a<s>a", AddSpecial::no, ParseSpecial::yes), (Ids{264, kA, 1, kA}));
    EXPECT_EQ(tok.decode(Ids{264, kA, 1, 264, kA}), "a<s> a");
    v.hf_metaspace = "always";
    EXPECT_EQ(make_tokenizer(v).encode("a<s>a", AddSpecial::no, ParseSpecial::yes), (Ids{264, kA, 1, 264, kA}));
    EXPECT_EQ(make_tokenizer(v).encode("b b", AddSpecial::no, ParseSpecial::yes), (Ids{264, 265, kB}));
    v.hf_metaspace_split = true;  // merges stop before each '▁': "b▁" cannot form
    EXPECT_EQ(make_tokenizer(v).encode("b b", AddSpecial::no, ParseSpecial::yes), (Ids{264, kB, 264, kB}));
}

}  // namespace
}  // namespace kvstash
