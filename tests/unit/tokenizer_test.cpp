// Tokenizer on small hand-made vocabularies: expected ids follow from the algorithm by hand (worked
// out in the comments); the SmolLM2 vocabulary against Hugging Face is in tests/parity/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/tokenizer.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_access.h"
#include "tokenizer/vocabulary.h"

namespace kvstash {
namespace {

using Ids = std::vector<int32_t>;

// ---------------------------------------------------------------------------------------------
// Byte-level alphabet and UTF-8

TEST(ByteLevel, AlphabetIsGpt2s) {
    using namespace tokenization;
    EXPECT_EQ(byte_to_code_point('A'), uint32_t{'A'});
    EXPECT_EQ(byte_to_code_point(' '), 0x120u);   // 'Ġ'
    EXPECT_EQ(byte_to_code_point('\n'), 0x10Au);  // 'Ċ'
    EXPECT_EQ(byte_to_code_point(0x00), 0x100u);
    EXPECT_EQ(byte_to_code_point(0x7F), 0x121u);  // after the 33 bytes 0x00-0x20
    EXPECT_EQ(byte_to_code_point(0xAD), 0x143u);  // the 68th and last remapped byte
    EXPECT_EQ(byte_to_code_point(0xE9), 0xE9u);
    for (int b = 0; b < 256; ++b) EXPECT_EQ(code_point_to_byte(byte_to_code_point(static_cast<uint8_t>(b))), b);
    EXPECT_EQ(code_point_to_byte(0x144), -1);
    EXPECT_EQ(code_point_to_byte(0x20), -1);  // a space is never in byte-level spelling
    EXPECT_EQ(to_byte_level(" hi\n"), "\xC4\xA0hi\xC4\x8A");
    std::string all;
    for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
    EXPECT_EQ(from_byte_level(to_byte_level(all)), all);
    EXPECT_EQ(from_byte_level("<|im_start|>"), "<|im_start|>");
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers

std::vector<std::string> split(const char* name, std::string_view text) {
    const tokenization::PreTokenizer pre(name);
    std::vector<std::string_view> pieces;
    pre.split(text, pieces);
    return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
    EXPECT_EQ(split("gpt2", "Hello world! I'm 42."), (Pieces{"Hello", " world", "!", " I", "'m", " 42", "."}));
    // A run of spaces gives all but the last to \s+(?!\S); the last one joins the next word.
    EXPECT_EQ(split("gpt2", "a   b"), (Pieces{"a", "  ", " b"}));
    EXPECT_EQ(split("gpt2", "a \n b"), (Pieces{"a", " \n", " b"}));
    EXPECT_EQ(split("gpt2", "end  "), (Pieces{"end", "  "}));
    EXPECT_EQ(split("default", "x=1"), split("gpt2", "x=1"));
    EXPECT_EQ(split("gpt2", "I'M"), (Pieces{"I", "'", "M"}));  // contractions are case-sensitive here
    EXPECT_TRUE(split("gpt2", "").empty());
}

TEST(PreTokenizer, SmolLMSplitsEveryDigit) {
    EXPECT_EQ(split("smollm", "abc123"), (Pieces{"abc", "1", "2", "3"}));
    // Digits split first, so the two spaces before the number stay together ("  ", "1"), where gpt2
    // alone gives " ", " 1". (SmolLM2 ids: [x, Ġ, Ġ=, ĠĠ, 1], as its tokenizer.json and llama.cpp.)
    EXPECT_EQ(split("smollm", "x  =  1"), (Pieces{"x", " ", " =", "  ", "1"}));
    EXPECT_EQ(split("gpt2", "x  =  1"), (Pieces{"x", " ", " =", " ", " 1"}));
    EXPECT_EQ(split("smollm", "\xC2\xBD!"), (Pieces{"\xC2\xBD", "!"}));  // '½' is \p{N} too
}

TEST(PreTokenizer, Llama3AndQwen2) {
    EXPECT_EQ(split("llama-bpe", "1234567"), (Pieces{"123", "456", "7"}));
    EXPECT_EQ(split("qwen2", "1234"), (Pieces{"1", "2", "3", "4"}));
    EXPECT_EQ(split("llama-bpe", "I'M here"), (Pieces{"I", "'M", " here"}));  // (?i:...) contractions
    EXPECT_EQ(split("llama-bpe", "(hello)\n\nworld"), (Pieces{"(hello", ")\n\n", "world"}));
    EXPECT_EQ(split("qwen2", "a  \n\n b"), (Pieces{"a", "  \n\n", " b"}));
}

TEST(PreTokenizer, MalformedUtf8IsIsolatedNotLost) {
    const Pieces pieces = split("gpt2", "ab\xFF\xFE cd\x80");
    EXPECT_EQ(pieces, (Pieces{"ab", "\xFF\xFE", " cd", "\x80"}));
}

TEST(PreTokenizer, UnknownNameListsKnownOnes) {
    try {
        tokenization::PreTokenizer pre("falcon");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::unsupported);
        EXPECT_NE(std::string(e.what()).find("'falcon'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("smollm"), std::string::npos) << e.what();
    }
}

// ---------------------------------------------------------------------------------------------
// Byte-level BPE on a hand-made vocabulary

// Ids 0..255: the byte-level spelling of byte b is token b. Then the merges' results, in order, and
// the `extra` tokens.
struct ByteLevelVocab {
    Vocabulary vocab;
    int32_t id(const std::string& spelled) const {
        for (size_t i = 0; i < vocab.tokens.size(); ++i) {
            if (vocab.tokens[i] == spelled) return static_cast<int32_t>(i);
        }
        ADD_FAILURE() << "no token " << spelled;
        return -1;
    }
};

ByteLevelVocab make_byte_level(const std::vector<std::string>& merges, const std::string& pre = "gpt2",
                               const std::vector<std::pair<std::string, TokenType>>& extra = {}) {
    ByteLevelVocab v;
    v.vocab.model = "gpt2";
    v.vocab.pre = pre;
    for (int b = 0; b < 256; ++b)
        v.vocab.tokens.push_back(tokenization::to_byte_level(std::string(1, static_cast<char>(b))));
    v.vocab.token_types.assign(256, static_cast<int32_t>(TokenType::normal));
    for (const std::string& merge : merges) {
        const size_t space = merge.find(' ');
        v.vocab.merges.push_back(merge);
        v.vocab.tokens.push_back(merge.substr(0, space) + merge.substr(space + 1));
        v.vocab.token_types.push_back(static_cast<int32_t>(TokenType::normal));
    }
    for (const auto& [text, type] : extra) {
        v.vocab.tokens.push_back(text);
        v.vocab.token_types.push_back(static_cast<int32_t>(type));
    }
    return v;
}

TEST(BytePairEncoding, MergesByRank) {
    // Ranks: 0 "h e", 1 "l l", 2 "he ll", 3 "hell o", 4 "Ġ w", 5 "o r", 6 "Ġw or".
    const ByteLevelVocab v = make_byte_level({"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r", "\xC4\xA0w or"});
    const Tokenizer tok = make_tokenizer(v.vocab);
    // "hello": h e l l o -> (rank 0) he l l o -> (1) he ll o -> (2) hell o -> (3) hello.
    EXPECT_EQ(tok.encode("hello", AddSpecial::no, ParseSpecial::no), (Ids{v.id("hello")}));
    // " world": Ġ w o r l d -> (4) Ġw o r l d -> (5) Ġw or l d -> (6) Ġwor l d; no "l d" merge.
    EXPECT_EQ(tok.encode("hello world", AddSpecial::no, ParseSpecial::no),
              (Ids{v.id("hello"), v.id("\xC4\xA0wor"), 'l', 'd'}));
    EXPECT_EQ(tok.decode(tok.encode("hello world", AddSpecial::no, ParseSpecial::no)), "hello world");
}

TEST(BytePairEncoding, LowerRankWinsOverPosition) {
    // "abc" with "b c" at rank 0 and "a b" at rank 1: b+c first, then "a bc" has no merge.
    const ByteLevelVocab v = make_byte_level({"b c", "a b"});
    const Tokenizer tok = make_tokenizer(v.vocab);
    EXPECT_EQ(tok.encode("abc", AddSpecial::no, ParseSpecial::no), (Ids{'a', v.id("bc")}));
    EXPECT_EQ(tok.encode("abd", AddSpecial::no, ParseSpecial::no), (Ids{v.id("ab"), 'd'}));
}

TEST(BytePairEncoding, EqualRankMergesLeftmostFirst) {
    // "aaa" with only "a a": the leftmost pair merges, leaving [aa, a]. With "aa aa" too, "aaaa" ends
    // as one token: a a a a -> aa a a -> aa aa (the leftmost remaining pair) -> aaaa.
    const ByteLevelVocab v = make_byte_level({"a a", "aa aa"});
    const Tokenizer tok = make_tokenizer(v.vocab);
    EXPECT_EQ(tok.encode("aaa", AddSpecial::no, ParseSpecial::no), (Ids{v.id("aa"), 'a'}));
    EXPECT_EQ(tok.encode("aaaa", AddSpecial::no, ParseSpecial::no), (Ids{v.id("aaaa")}));
    EXPECT_EQ(tok.encode("aaaaa", AddSpecial::no, ParseSpecial::no), (Ids{v.id("aaaa"), 'a'}));
}

TEST(BytePairEncoding, WordsDoNotMergeAcrossPreTokens) {
    // The merge "a Ġ" exists, but the pre-tokenizer cuts "a b" into "a" and " b" first.
    // (Token b is byte b here, so ' ' is id 0x20.)
    const ByteLevelVocab v = make_byte_level({"a \xC4\xA0"});
    const Tokenizer tok = make_tokenizer(v.vocab);
    EXPECT_EQ(tok.encode("a b", AddSpecial::no, ParseSpecial::no), (Ids{'a', ' ', 'b'}));
    EXPECT_EQ(tok.encode("a", AddSpecial::no, ParseSpecial::no), (Ids{'a'}));
}

TEST(BytePairEncoding, IgnoreMergesEmitsWholeWordTokens) {
    // "abc" is a token, but no merge sequence builds it. llama-bpe (Llama 3) has HF's ignore_merges:
    // a word that is a token is taken whole; gpt2 runs the merges and ends at [ab, c].
    const std::vector<std::pair<std::string, TokenType>> extra = {{"abc", TokenType::normal}};
    const ByteLevelVocab llama3 = make_byte_level({"a b"}, "llama-bpe", extra);
    const ByteLevelVocab gpt2 = make_byte_level({"a b"}, "gpt2", extra);
    EXPECT_EQ(make_tokenizer(llama3.vocab).encode("abc", AddSpecial::no, ParseSpecial::no), (Ids{llama3.id("abc")}));
    EXPECT_EQ(make_tokenizer(gpt2.vocab).encode("abc", AddSpecial::no, ParseSpecial::no), (Ids{gpt2.id("ab"), 'c'}));
}

TEST(BytePairEncoding, MergesOutsideTheVocabularyAreIgnored) {
    ByteLevelVocab v = make_byte_level({"a b"});
    v.vocab.merges.insert(v.vocab.merges.begin(), "x y");  // "xy" is no token
    v.vocab.merges.push_back("nospace");
    const Tokenizer tok = make_tokenizer(v.vocab);
    EXPECT_EQ(tok.encode("xyab", AddSpecial::no, ParseSpecial::no), (Ids{'x', 'y', v.id("ab")}));
}

TEST(BytePairEncoding, BytesWithoutATokenAreDropped) {
    ByteLevelVocab v = make_byte_level({});
    v.vocab.tokens[0xFF] = "<unused-ff>";  // the vocabulary cannot spell byte 0xFF any more
    const Tokenizer tok = make_tokenizer(v.vocab);
    EXPECT_EQ(tok.encode("a\xFF"
                         "b",
                         AddSpecial::no, ParseSpecial::no),
              (Ids{'a', 'b'}));
}

TEST(BytePairEncoding, AnyBytesRoundTrip) {
    const ByteLevelVocab v = make_byte_level({"h e", "\xC3 \xA9"});
    const Tokenizer tok = make_tokenizer(v.vocab);
    std::string all;
    for (int b = 255; b >= 0; --b) all += static_cast<char>(b);
    for (const std::string& s :
         {all, std::string("caf\xC3\xA9 \xC3\xA9t\xC3\xA9"), std::string("\xFF\xFE\x80 he\xC3")}) {
        for (bool parse_special : {false, true})
            EXPECT_EQ(tok.decode(tok.encode(s, AddSpecial::no, parse_special ? ParseSpecial::yes : ParseSpecial::no)),
                      s);
    }
}

// ---------------------------------------------------------------------------------------------
// Special tokens

TEST(SpecialTokens, ParsedOnlyWhenAsked) {
    const ByteLevelVocab v = make_byte_level({}, "gpt2",
                                             {{"<|im_start|>", TokenType::control},
                                              {"<|im_end|>", TokenType::control},
                                              {"<think>", TokenType::user_defined}});
    const int32_t start = v.id("<|im_start|>"), end = v.id("<|im_end|>"), think = v.id("<think>");
    const Tokenizer tok = make_tokenizer(v.vocab);
    const std::string text = "<|im_start|>hi<think><|im_end|>";
    EXPECT_EQ(tok.encode(text, AddSpecial::no, ParseSpecial::yes), (Ids{start, 'h', 'i', think, end}));
    // Unparsed, control tokens are text; user-defined tokens are matched anyway (llama.cpp, HF).
    const Ids plain = tok.encode(text, AddSpecial::no, ParseSpecial::no);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), start), 0);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), think), 1);
    EXPECT_EQ(tok.decode(plain), text);
    EXPECT_EQ(tok.decode(tok.encode(text, AddSpecial::no, ParseSpecial::yes)), text);
    // A partial special token is plain text.
    EXPECT_EQ(tok.encode("<|im_start", AddSpecial::no, ParseSpecial::yes).size(), 10u);
    EXPECT_EQ(tok.token_piece(start), "<|im_start|>");
}

TEST(SpecialTokens, LongestMatchWins) {
    const ByteLevelVocab v = make_byte_level({}, "gpt2", {{"<a>", TokenType::control}, {"<a><b>", TokenType::control}});
    const Tokenizer tok = make_tokenizer(v.vocab);
    EXPECT_EQ(tok.encode("<a><b>", AddSpecial::no, ParseSpecial::yes), (Ids{v.id("<a><b>")}));
    EXPECT_EQ(tok.encode("<a><c>", AddSpecial::no, ParseSpecial::yes), (Ids{v.id("<a>"), '<', 'c', '>'}));
}

TEST(SpecialTokens, SplitTheTextIntoSeparateWords) {
    // " x" after a special token is its own word; "a<s> b" is "a", <s>, " b".
    const ByteLevelVocab v = make_byte_level({"a \xC4\xA0"}, "gpt2", {{"<s>", TokenType::control}});
    const Tokenizer tok = make_tokenizer(v.vocab);
    EXPECT_EQ(tok.encode("a<s> b", AddSpecial::no, ParseSpecial::yes), (Ids{'a', v.id("<s>"), v.id("\xC4\xA0"), 'b'}));
}

TEST(SpecialTokens, BosEosAndEndOfGeneration) {
    ByteLevelVocab v = make_byte_level({}, "gpt2",
                                       {{"<|begin|>", TokenType::control},
                                        {"<|end|>", TokenType::control},
                                        {"<|im_end|>", TokenType::control},
                                        {"<|other|>", TokenType::control}});
    v.vocab.bos_id = v.id("<|begin|>");
    v.vocab.eos_id = v.id("<|end|>");
    v.vocab.add_bos = true;
    v.vocab.add_eos = true;
    const Tokenizer tok = make_tokenizer(v.vocab);
    EXPECT_EQ(tok.encode("a", AddSpecial::yes, ParseSpecial::no), (Ids{v.id("<|begin|>"), 'a', v.id("<|end|>")}));
    EXPECT_EQ(tok.encode("a", AddSpecial::no, ParseSpecial::no), (Ids{'a'}));
    EXPECT_EQ(tok.encode("", AddSpecial::yes, ParseSpecial::no), (Ids{v.id("<|begin|>"), v.id("<|end|>")}));
    EXPECT_EQ(tok.bos(), v.id("<|begin|>"));
    EXPECT_EQ(tok.eos(), v.id("<|end|>"));
    EXPECT_TRUE(tok.is_eog(tok.eos()));
    EXPECT_TRUE(tok.is_eog(v.id("<|im_end|>")));
    EXPECT_FALSE(tok.is_eog(v.id("<|other|>")));
    EXPECT_FALSE(tok.is_eog('a'));
    EXPECT_FALSE(tok.is_eog(-1));
    EXPECT_EQ(tok.n_vocab(), 260);
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(TokenizerErrors, UnknownModelOrPreTokenizer) {
    ByteLevelVocab v = make_byte_level({});
    v.vocab.model = "bert";
    try {
        Tokenizer tok = make_tokenizer(v.vocab);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::unsupported);
        EXPECT_NE(std::string(e.what()).find("'bert'"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("gpt2"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("llama"), std::string::npos);
    }
    v.vocab.model = "gpt2";
    v.vocab.pre = "deepseek-coder";
    EXPECT_THROW(make_tokenizer(v.vocab), Error);
    v.vocab.pre = "";  // no tokenizer.ggml.pre: GPT-2's pattern
    EXPECT_NO_THROW(make_tokenizer(v.vocab));
}

TEST(TokenizerErrors, InconsistentVocabularyAndBadIds) {
    ByteLevelVocab v = make_byte_level({});
    v.vocab.token_types.pop_back();
    EXPECT_THROW(make_tokenizer(v.vocab), Error);
    v = make_byte_level({});
    v.vocab.eos_id = 999;
    EXPECT_THROW(make_tokenizer(v.vocab), Error);
    Vocabulary empty;
    empty.model = "gpt2";
    EXPECT_THROW(make_tokenizer(empty), Error);

    const Tokenizer tok = make_tokenizer(make_byte_level({}).vocab);
    const Ids bad = {'a', 256};
    EXPECT_THROW(tok.decode(bad), Error);
    EXPECT_THROW(tok.token_piece(-1), Error);
}

TEST(Tokenizer, ConcurrentEncodeIsSafe) {
    const ByteLevelVocab v = make_byte_level({"h e", "l l", "he ll", "hell o"});
    const Tokenizer tok = make_tokenizer(v.vocab);
    const Ids expected = tok.encode("hello hello 123 hello", AddSpecial::no, ParseSpecial::yes);
    std::vector<std::thread> threads;
    std::vector<int> ok(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 200; ++i)
                ok[t] += tok.encode("hello hello 123 hello", AddSpecial::no, ParseSpecial::yes) == expected;
        });
    }
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 200);
}

// ---------------------------------------------------------------------------------------------
// SentencePiece BPE ("llama") on a hand-made vocabulary

constexpr const char* kMark = "\xE2\x96\x81";  // '▁'

struct SpmVocab {
    Vocabulary vocab;
    int32_t id(const std::string& text) const {
        for (size_t i = 0; i < vocab.tokens.size(); ++i) {
            if (vocab.tokens[i] == text) return static_cast<int32_t>(i);
        }
        ADD_FAILURE() << "no token " << text;
        return -1;
    }
};

// The expected ids below are worked out from the algorithm in the comments. They were also checked
// once against HF tokenizers running Llama 2's (legacy) tokenizer.json pipeline on this vocabulary:
// BPE(byte_fallback) with normalizer Sequence[Prepend("▁"), Replace(" ", "▁")], which agrees with
// llama.cpp. (transformers 5's GGUF loader instead uses Metaspace(prepend_scheme="first"): no "▁" after a
// special token nor before text that starts with a space, so it differs on "  he", " hello", "a</s>b".)
//
// Like a Llama 2 vocabulary in miniature: <unk> <s> </s>, 256 byte tokens, then pieces with scores
// (higher merges first).
SpmVocab make_spm(bool with_bytes = true) {
    SpmVocab v;
    Vocabulary& vocab = v.vocab;
    vocab.model = "llama";
    vocab.pre = "default";
    const auto add = [&](const std::string& text, TokenType type, float score) {
        vocab.tokens.push_back(text);
        vocab.token_types.push_back(static_cast<int32_t>(type));
        vocab.scores.push_back(score);
    };
    add("<unk>", TokenType::unknown, 0);
    add("<s>", TokenType::control, 0);
    add("</s>", TokenType::control, 0);
    if (with_bytes) {
        for (int b = 0; b < 256; ++b) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", b);
            add(name, TokenType::byte, 0);
        }
    }
    const std::string m = kMark;
    const std::pair<std::string, float> pieces[] = {
        {m, -1},           {"h", -2},  {"e", -2},      {"l", -2},        {"o", -2},   {"w", -2},          {"r", -2},
        {"d", -2},         {"a", -2},  {"ll", -3},     {m + "h", -4},    {"he", -5},  {m + "he", -6},     {"llo", -7},
        {m + "hello", -8}, {"or", -9}, {m + "w", -10}, {m + "wor", -11}, {"ld", -12}, {m + "world", -13}, {m + m, -14},
    };
    for (const auto& [text, score] : pieces) add(text, TokenType::normal, score);
    vocab.unk_id = 0;
    vocab.bos_id = 1;
    vocab.eos_id = 2;
    vocab.add_bos = true;
    vocab.add_space_prefix = true;
    return v;
}

TEST(SentencePiece, MergesByScore) {
    const SpmVocab v = make_spm();
    const Tokenizer tok = make_tokenizer(v.vocab);
    const std::string m = kMark;
    // "hello" -> "▁hello" (space prefix). Symbols ▁ h e l l o. Candidate pairs and their scores:
    // ▁h -4, he -5, el (none), ll -3, lo (none). Best: ll (-3) -> ▁ h e ll o; then ▁h (-4) ->
    // ▁h e ll o; then ▁h+e = ▁he (-6) -> ▁he ll o; ll+o = llo (-7) -> ▁he llo; ▁he+llo = ▁hello (-8).
    EXPECT_EQ(tok.encode("hello", AddSpecial::no, ParseSpecial::no), (Ids{v.id(m + "hello")}));
    // " world": ▁ w o r l d; or (-9) first, then ▁w (-10), ▁w+or = ▁wor (-11), ld (-12), ▁world (-13).
    EXPECT_EQ(tok.encode("hello world", AddSpecial::yes, ParseSpecial::no),
              (Ids{1, v.id(m + "hello"), v.id(m + "world")}));
    // "wa": ▁ w a -> ▁w, a (no "▁wa").
    EXPECT_EQ(tok.encode("wa", AddSpecial::no, ParseSpecial::no), (Ids{v.id(m + "w"), v.id("a")}));
}

TEST(SentencePiece, SpacesAndPrefix) {
    const SpmVocab v = make_spm();
    const Tokenizer tok = make_tokenizer(v.vocab);
    const std::string m = kMark;
    // "  he": prefix + two spaces = ▁▁▁he. Pairs: ▁▁ (-14) twice, ▁h (-4), he (-5). ▁h first (it is
    // the best), then ▁h+e = ▁he (-6); then the leftmost ▁▁ (-14): [▁▁, ▁he].
    EXPECT_EQ(tok.encode("  he", AddSpecial::no, ParseSpecial::no), (Ids{v.id(m + m), v.id(m + "he")}));
    EXPECT_EQ(tok.decode(tok.encode("  he", AddSpecial::no, ParseSpecial::no)), "  he");
    // " hello" -> ▁▁hello: ▁▁ (-14) loses to the merges inside "hello", which end as ▁hello; [▁, ▁hello].
    EXPECT_EQ(tok.encode(" hello", AddSpecial::no, ParseSpecial::no), (Ids{v.id(m), v.id(m + "hello")}));
    // "a  b" -> ▁a▁▁b: only ▁▁ merges; 'b' is no piece, so it is <0x62>.
    EXPECT_EQ(tok.encode("a  b", AddSpecial::no, ParseSpecial::no), (Ids{v.id(m), v.id("a"), v.id(m + m), 3 + 'b'}));
    // Without add_space_prefix nothing is prepended.
    SpmVocab no_prefix = make_spm();
    no_prefix.vocab.add_space_prefix = false;
    EXPECT_EQ(make_tokenizer(no_prefix.vocab).encode("he", AddSpecial::no, ParseSpecial::no), (Ids{v.id("he")}));
}

TEST(SentencePiece, ByteFallbackAndUnknown) {
    const SpmVocab v = make_spm();
    const Tokenizer tok = make_tokenizer(v.vocab);
    const std::string m = kMark;
    // 'é' (C3 A9) is no piece: its bytes become <0xC3> <0xA9> (ids 3 + byte).
    EXPECT_EQ(tok.encode("h\xC3\xA9", AddSpecial::no, ParseSpecial::no), (Ids{v.id(m + "h"), 3 + 0xC3, 3 + 0xA9}));
    EXPECT_EQ(tok.decode(tok.encode("h\xC3\xA9", AddSpecial::no, ParseSpecial::no)), "h\xC3\xA9");
    // Malformed UTF-8 is byte fallback as well and round-trips.
    EXPECT_EQ(tok.decode(tok.encode("a\xFF\x80z", AddSpecial::no, ParseSpecial::no)), "a\xFF\x80z");
    EXPECT_EQ(tok.token_piece(3 + 'A'), "A");
    // Without byte tokens, an unknown character is one <unk>.
    const SpmVocab no_bytes = make_spm(/*with_bytes=*/false);
    const Tokenizer tok2 = make_tokenizer(no_bytes.vocab);
    EXPECT_EQ(tok2.encode("h\xC3\xA9", AddSpecial::no, ParseSpecial::no), (Ids{no_bytes.id(m + "h"), 0}));
}

TEST(SentencePiece, SpecialTokensAndDecode) {
    const SpmVocab v = make_spm();
    const Tokenizer tok = make_tokenizer(v.vocab);
    const std::string m = kMark;
    // As llama.cpp: the text after a special token gets the space prefix again, and decode drops it.
    const Ids ids = tok.encode("hello</s>world", AddSpecial::no, ParseSpecial::yes);
    EXPECT_EQ(ids, (Ids{v.id(m + "hello"), 2, v.id(m + "world")}));
    EXPECT_EQ(tok.decode(ids), "hello</s>world");
    EXPECT_EQ(tok.decode(tok.encode("hello world", AddSpecial::yes, ParseSpecial::no)), "<s>hello world");
    EXPECT_EQ(tok.token_piece(v.id(m + "hello")), " hello");  // streaming keeps the space
    EXPECT_EQ(tok.encode("", AddSpecial::yes, ParseSpecial::no), (Ids{1}));
    EXPECT_EQ(tok.encode("", AddSpecial::no, ParseSpecial::no), (Ids{}));
    EXPECT_TRUE(tok.is_eog(2));
}

TEST(SentencePiece, UserDefinedTokensRoundTrip) {
    SpmVocab v = make_spm();
    v.vocab.tokens.push_back("<tool>");
    v.vocab.token_types.push_back(static_cast<int32_t>(TokenType::user_defined));
    v.vocab.scores.push_back(0);
    const Tokenizer tok = make_tokenizer(v.vocab);
    const std::string m = kMark;
    // Matched even without parse_special; the text after it gets the space prefix like after <s>.
    const Ids ids = tok.encode("he<tool>hello", AddSpecial::no, ParseSpecial::no);
    EXPECT_EQ(ids, (Ids{v.id(m + "he"), v.id("<tool>"), v.id(m + "hello")}));
    EXPECT_EQ(tok.decode(ids), "he<tool>hello");
}

}  // namespace
}  // namespace kvstash
