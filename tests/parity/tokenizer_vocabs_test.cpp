// The tokenizer on vocabularies other than the default model's, against Hugging Face and llama.cpp:
// llama.cpp's vocab-only GGUFs for Llama 3 (llama-bpe), Qwen2, GPT-2, Llama 2 (llama-spm) and Phi-3,
// put in models/vocabs/ ($KVSTASH_MODELS_DIR/vocabs/) by scripts/fetch_vocabs.sh.
// Oracles, per vocabulary:
//   1. <gguf>.inp / <gguf>.out: llama.cpp's test-tokenizer-0 cases, the ids the model's own HF
//      tokenizer gave (llama.cpp's convert_hf_to_gguf_update.py; add_special_tokens=False).
//   2. tests/fixtures/tokenizer/<vocab>_corpus.json, written by tests/reference/make_vocab_corpora.py:
//      transformers' GGUF tokenizer, corrected where it departs from the model's tokenizer.json (the
//      corrections are recorded in the fixture), on the shared ~1,300-string corpus.
//   3. decode(encode(s)) == s for every s the vocabulary can spell.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.h"
#include "kvstash/tokenizer.h"
#include "support/encode_scaling.h"
#include "support/paths.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer_access.h"
#include "tokenizer/unicode_nfc.h"
#include "tokenizer/vocabulary.h"

namespace kvstash {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

const std::vector<std::string> kVocabs = {"llama-bpe", "qwen2", "gpt-2", "llama-spm", "phi-3"};

// Strings on which kvstash is known to differ from the HF oracle, and why. A listed string that
// matches again fails the test, so that this list only ever holds real differences. Empty: every
// corpus string matches on all five vocabularies, including the ones with code points that Unicode 14
// (PCRE2 10.42) leaves unassigned, where the pre-tokenizer splits could differ from HF's newer tables.
struct KnownDifference {
    std::string vocab;
    std::string text;  // the corpus string, exactly
    bool parse_special;
    std::string reason;
};
const std::vector<KnownDifference> kKnownDifferences = {};

const KnownDifference* known_difference(const std::string& vocab, const std::string& text, bool parse_special) {
    for (const KnownDifference& k : kKnownDifferences) {
        if (vocab == k.vocab && text == k.text && parse_special == k.parse_special) return &k;
    }
    return nullptr;
}

std::string vocab_dir() {
    if (const char* dir = std::getenv("KVSTASH_MODELS_DIR"); dir != nullptr && *dir != '\0') {
        return std::string(dir) + "/vocabs";
    }
    return test::source_dir() + "/models/vocabs";
}

std::string gguf_path(const std::string& vocab) { return vocab_dir() + "/ggml-vocab-" + vocab + ".gguf"; }

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// llama.cpp's test-tokenizer-0 format (tests/test-tokenizer-0.cpp read_tests): the .inp is the strings,
// each followed by "\n__ggml_vocab_test__\n"; the .out has one line per string, the ids separated by
// spaces (with a leading space; an empty line for no ids).
std::vector<std::pair<std::string, Ids>> read_llama_cpp_cases(const std::string& path) {
    const std::string inp = read_file(path + ".inp");
    const std::string out = read_file(path + ".out");
    const std::string_view separator = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    for (size_t pos = 0; pos < inp.size();) {
        const size_t next = inp.find(separator, pos);
        if (next == std::string::npos) {
            texts.push_back(inp.substr(pos));
            break;
        }
        texts.push_back(inp.substr(pos, next - pos));
        pos = next + separator.size();
    }
    std::vector<Ids> ids;
    for (size_t pos = 0; pos < out.size();) {
        size_t end = out.find('\n', pos);
        if (end == std::string::npos) end = out.size();
        Ids line;
        for (size_t p = pos; p < end;) {
            const size_t space = out.find(' ', p);
            const size_t stop = space == std::string::npos || space > end ? end : space;
            if (stop > p) line.push_back(std::stoi(out.substr(p, stop - p)));
            p = stop + 1;
        }
        ids.push_back(std::move(line));
        pos = end + 1;
    }
    if (texts.size() != ids.size()) {
        throw std::runtime_error(path + ": " + std::to_string(texts.size()) + " strings in .inp but " +
                                 std::to_string(ids.size()) + " lines in .out");
    }
    std::vector<std::pair<std::string, Ids>> cases;
    for (size_t i = 0; i < texts.size(); ++i) cases.emplace_back(std::move(texts[i]), std::move(ids[i]));
    return cases;
}

std::string from_hex(const std::string& hex) {
    std::string bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return bytes;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
    std::string out;
    size_t pos = 0;
    for (size_t hit; (hit = text.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
        out.append(text.substr(pos, hit - pos));
        out.append(to);
    }
    out.append(text.substr(pos));
    return out;
}

std::string show(const Ids& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size() && i < 40; ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
    return s + (ids.size() > 40 ? ", ...]" : "]");
}

std::string excerpt(const std::string& text) {
    std::string out = "\"";
    out.append(text, 0, 120);
    out += text.size() > 120 ? "...\"" : "\"";
    return out;
}

struct LoadedVocab {
    std::unique_ptr<Tokenizer> tokenizer;
    std::array<bool, 256> spellable{};  // bytes encode() does not drop
    json corpus;
};

class VocabParity : public ::testing::TestWithParam<std::string> {
protected:
    // Loads the vocabulary once per process; nullptr when its files are missing.
    static const LoadedVocab* load(const std::string& vocab) {
        static std::map<std::string, std::unique_ptr<LoadedVocab>> cache;
        auto& slot = cache[vocab];
        if (!slot) {
            auto loaded = std::make_unique<LoadedVocab>();
            const auto file = gguf::File::open(gguf_path(vocab));
            loaded->tokenizer = std::make_unique<Tokenizer>(make_tokenizer(vocabulary_from_gguf(*file)));
            for (int b = 0; b < 256; ++b) {
                const std::string byte(1, static_cast<char>(b));
                loaded->spellable[b] = !loaded->tokenizer->encode(byte, AddSpecial::no, ParseSpecial::no).empty();
            }
            std::ifstream in(test::fixture_path("tokenizer/" + vocab + "_corpus.json"));
            if (in) loaded->corpus = json::parse(in);
            slot = std::move(loaded);
        }
        return slot.get();
    }

    // The vocabulary's files are present, or the test fails (skips with KVSTASH_ALLOW_NO_MODEL=1).
    bool files_present(const std::string& vocab) {
        for (const char* suffix : {"", ".inp", ".out"}) {
            if (!std::filesystem::exists(gguf_path(vocab) + suffix)) return false;
        }
        return true;
    }

    std::string kept(const LoadedVocab& v, const std::string& text) const {
        std::string out;
        for (char c : text) {
            if (v.spellable[static_cast<uint8_t>(c)]) out += c;
        }
        // SentencePiece writes spaces as U+2581, so one in the text comes back as a space.
        if (tokenizer_vocabulary(*v.tokenizer).model == "llama") out = replace_all(out, "\xE2\x96\x81", " ");
        return out;
    }
};

#define KVSTASH_REQUIRE_VOCAB(vocab)                                                                     \
    do {                                                                                                 \
        if (!files_present(vocab)) {                                                                     \
            const char* allow = std::getenv("KVSTASH_ALLOW_NO_MODEL");                                   \
            if (allow != nullptr && std::string(allow) == "1") {                                         \
                GTEST_SKIP() << "vocabulary " << (vocab) << " missing (KVSTASH_ALLOW_NO_MODEL=1)";       \
            }                                                                                            \
            FAIL() << gguf_path(vocab) << "{,.inp,.out} not found; run scripts/fetch_vocabs.sh (or set " \
                   << "KVSTASH_MODELS_DIR to the folder holding vocabs/)";                               \
        }                                                                                                \
    } while (0)

// llama.cpp's cases, exactly: add_special = false, parse_special = false, as test-tokenizer-0 runs them.
TEST_P(VocabParity, LlamaCppCasesMatch) {
    const std::string vocab = GetParam();
    KVSTASH_REQUIRE_VOCAB(vocab);
    const Tokenizer& tok = *load(vocab)->tokenizer;
    const auto cases = read_llama_cpp_cases(gguf_path(vocab));
    int matched = 0;
    for (const auto& [text, expected] : cases) {
        const Ids ids = tok.encode(text, AddSpecial::no, ParseSpecial::no);
        matched += ids == expected;
        EXPECT_EQ(ids, expected) << vocab << " on " << excerpt(text) << "\n  kvstash: " << show(ids)
                                 << "\n  HF:      " << show(expected);
    }
    std::cout << "[ parity   ] " << vocab << ": llama.cpp test-tokenizer-0 cases " << matched << "/" << cases.size()
              << "\n";
    EXPECT_GE(cases.size(), 40u);
}

// Every corpus string, with and without parsing special tokens, against the fixture's HF ids.
TEST_P(VocabParity, CorpusMatchesHuggingFace) {
    const std::string vocab = GetParam();
    KVSTASH_REQUIRE_VOCAB(vocab);
    const LoadedVocab& v = *load(vocab);
    ASSERT_FALSE(v.corpus.is_null()) << "missing " << test::fixture_path("tokenizer/" + vocab + "_corpus.json")
                                     << "; run tests/reference/make_vocab_corpora.py";
    const Tokenizer& tok = *v.tokenizer;
    int total = 0, matched = 0, matched_plain = 0, known = 0, known_plain = 0, converter = 0;
    for (const json& entry : v.corpus["entries"]) {
        if (!entry.contains("text")) continue;
        const std::string text = entry["text"];
        const auto expected = entry["ids"].get<Ids>();
        const auto expected_plain = entry.value("ids_plain", expected);
        ++total;
        converter += entry.contains("ids_transformers_gguf") || entry.contains("ids_plain_transformers_gguf");
        for (bool parse_special : {true, false}) {
            const Ids ids = tok.encode(text, AddSpecial::no, parse_special ? ParseSpecial::yes : ParseSpecial::no);
            const Ids& want = parse_special ? expected : expected_plain;
            const bool same = ids == want;
            if (const KnownDifference* k = known_difference(vocab, text, parse_special)) {
                (parse_special ? known : known_plain) += 1;
                EXPECT_FALSE(same) << vocab << ": listed known difference now matches HF; remove it from "
                                   << "kKnownDifferences: " << excerpt(text) << " (" << k->reason << ")";
                continue;
            }
            (parse_special ? matched : matched_plain) += same;
            EXPECT_TRUE(same) << vocab << (parse_special ? "" : " (parse_special=false)") << " on " << excerpt(text)
                              << "\n  kvstash: " << show(ids) << "\n  HF:      " << show(want);
        }
    }
    std::cout << "[ parity   ] " << vocab << ": corpus " << matched << "/" << total - known
              << " match HF (parse_special), " << matched_plain << "/" << total - known_plain
              << " without parsing specials; known differences " << known << " + " << known_plain << "; " << converter
              << " strings where the fixture's oracle corrects transformers' GGUF tokenizer\n";
    EXPECT_GE(total, 1000);
    const auto counts = v.corpus["llama_cpp_out_matches"];
    EXPECT_EQ(counts["fixed"], counts["total"]) << "the fixture's oracle does not reproduce llama.cpp's .out";
}

// decode(encode(s)) gives s back, less bytes the vocabulary cannot spell, after the normalizer
// (Qwen2: NFC) and with the whitespace that rstrip tokens swallow (Phi-3) removed, as the fixture
// records; malformed UTF-8 too, and token by token (streaming) as well as whole.
TEST_P(VocabParity, DecodeRoundTrips) {
    const std::string vocab = GetParam();
    KVSTASH_REQUIRE_VOCAB(vocab);
    const LoadedVocab& v = *load(vocab);
    ASSERT_FALSE(v.corpus.is_null());
    const Tokenizer& tok = *v.tokenizer;
    int total = 0, round_trips = 0;
    for (const json& entry : v.corpus["entries"]) {
        const bool malformed = entry.contains("hex");
        const std::string text = malformed ? from_hex(entry["hex"]) : entry["text"].get<std::string>();
        const std::string normalized = entry.value("normalized", text);
        for (bool parse_special : {true, false}) {
            const std::string expected =
                kept(v, entry.value(parse_special ? "round_trip" : "round_trip_plain", normalized));
            const Ids ids = tok.encode(text, AddSpecial::no, parse_special ? ParseSpecial::yes : ParseSpecial::no);
            const std::string decoded = tok.decode(ids);
            ++total;
            round_trips += decoded == expected;
            EXPECT_EQ(decoded, expected) << vocab << (parse_special ? "" : " (parse_special=false)") << " on "
                                         << (malformed ? "hex " + entry["hex"].get<std::string>() : excerpt(text));
        }
    }
    std::cout << "[ parity   ] " << vocab << ": decode(encode(s)) round trips " << round_trips << "/" << total << "\n";
}

// Special ids and flags as llama.cpp reads them from each file.
TEST_P(VocabParity, SpecialTokens) {
    const std::string vocab = GetParam();
    KVSTASH_REQUIRE_VOCAB(vocab);
    const Tokenizer& tok = *load(vocab)->tokenizer;
    struct Expect {
        const char* vocab;
        int32_t n_vocab, bos, eos;
        bool add_bos;
        const char* eog;
    };
    constexpr Expect kExpected[] = {
        {"llama-bpe", 128256, 128000, 128001, true, "<|eot_id|>"},
        {"qwen2", 151936, 151643, 151643, false, "<|im_end|>"},
        {"gpt-2", 50257, 50256, 50256, false, "<|endoftext|>"},
        {"llama-spm", 32000, 1, 2, true, "</s>"},
        {"phi-3", 32064, 1, 32000, true, "<|end|>"},
    };
    for (const Expect& e : kExpected) {
        if (vocab != e.vocab) continue;
        EXPECT_EQ(tok.n_vocab(), e.n_vocab);
        EXPECT_EQ(tok.bos(), e.bos);
        EXPECT_EQ(tok.eos(), e.eos);
        EXPECT_EQ(tokenizer_vocabulary(tok).add_bos, e.add_bos);
        const Ids eog = tok.encode(e.eog, AddSpecial::no, ParseSpecial::yes);
        ASSERT_EQ(eog.size(), 1u) << e.eog;
        EXPECT_TRUE(tok.is_eog(eog[0])) << e.eog;
        const Ids with_special = tok.encode("Hi", AddSpecial::yes, ParseSpecial::yes);
        ASSERT_FALSE(with_special.empty());
        EXPECT_EQ(with_special.front() == e.bos, e.add_bos);
    }
}

// Speed: 100 KB of the corpus, and inputs that defeat a quadratic merge loop or regex (one 100 KB
// word, 100 KB of spaces, pseudo-random bytes), in near-linear time (support/encode_scaling.h).
TEST_P(VocabParity, EncodesInLinearTime) {
    const std::string vocab = GetParam();
    KVSTASH_REQUIRE_VOCAB(vocab);
    const LoadedVocab& v = *load(vocab);
    ASSERT_FALSE(v.corpus.is_null());
    const size_t n = 100 * 1024;
    std::string mixed;
    while (mixed.size() < n) {
        for (const json& entry : v.corpus["entries"]) {
            if (entry.contains("text")) mixed += entry["text"].get<std::string>() + "\n";
        }
    }
    mixed.resize(n);  // may cut a character: the tokenizer takes any bytes
    std::string random_bytes(n, '\0');
    uint32_t state = 12345;
    for (char& c : random_bytes) {
        state = state * 1664525u + 1013904223u;
        c = static_cast<char>(state >> 24);
    }
    const std::pair<const char*, std::string> inputs[] = {
        {"corpus", mixed},
        {"one word", std::string(n, 'a')},
        {"spaces", std::string(n, ' ')},
        {"random bytes", random_bytes},
    };
    for (const auto& [name, text] : inputs) test::expect_near_linear_encoding(*v.tokenizer, text, vocab + ", " + name);
}

// NFC (Qwen2's normalizer) without the vocabulary: every fixture string against Python's
// unicodedata.normalize("NFC") (the fixture's `normalized`, else the text itself), and cases worked by
// hand from UAX #15.
TEST(UnicodeNfc, MatchesPythonOnQwen2Fixture) {
    std::ifstream in(test::fixture_path("tokenizer/qwen2_corpus.json"));
    ASSERT_TRUE(in) << "missing tokenizer/qwen2_corpus.json; run tests/reference/make_vocab_corpora.py";
    const json corpus = json::parse(in);
    int total = 0, changed = 0;
    for (const json& entry : corpus["entries"]) {
        if (!entry.contains("text")) continue;
        const std::string text = entry["text"];
        const std::string expected = entry.value("normalized", text);
        EXPECT_EQ(tokenization::to_nfc(text), expected) << excerpt(text);
        ++total;
        changed += expected != text;
    }
    EXPECT_GE(changed, 40) << "the corpus should hold text that NFC changes";
    std::cout << "[ parity   ] NFC: " << total << " strings (" << changed << " not in NFC) as Python's\n";
}

TEST(UnicodeNfc, HandWorkedCases) {
    using tokenization::to_nfc;
    EXPECT_EQ(to_nfc("plain ASCII, Latin-1 \xC3\xA9"), "plain ASCII, Latin-1 \xC3\xA9");
    EXPECT_EQ(to_nfc("e\xCC\x81"), "\xC3\xA9");                                 // e + U+0301 -> U+00E9
    EXPECT_EQ(to_nfc("\xE2\x84\xAB"), "\xC3\x85");                              // U+212B ANGSTROM -> U+00C5 (singleton)
    EXPECT_EQ(to_nfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");                // marks reordered by class (220 < 230)
    EXPECT_EQ(to_nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // Hangul L V T -> U+AC01
    EXPECT_EQ(to_nfc("\xCD\x84"), "\xCC\x88\xCC\x81");                          // U+0344: excluded, stays decomposed
    EXPECT_EQ(to_nfc("\xCC\x81"
                     "e"),
              "\xCC\x81"
              "e");  // a leading mark has no starter
    // Malformed bytes pass through and block composition across them.
    EXPECT_EQ(to_nfc("e\xFF\xCC\x81\xC3"), "e\xFF\xCC\x81\xC3");
}

// rstrip (Phi-3's added tokens) on a hand-made byte-level vocabulary: the token swallows the Unicode
// White_Space after it, only when it is matched; HF AddedToken(rstrip=True) semantics.
TEST(SpecialTokenRstrip, SwallowsWhitespaceAfterMatchedToken) {
    Vocabulary vocab;
    vocab.model = "gpt2";
    vocab.pre = "gpt2";
    for (int b = 0; b < 256; ++b) {
        vocab.tokens.push_back(tokenization::to_byte_level(std::string(1, static_cast<char>(b))));
    }
    vocab.token_types.assign(256, static_cast<int32_t>(TokenType::normal));
    vocab.tokens.push_back("<|end|>");
    vocab.token_types.push_back(static_cast<int32_t>(TokenType::control));
    vocab.tokens.push_back("</s>");
    vocab.token_types.push_back(static_cast<int32_t>(TokenType::user_defined));
    vocab.rstrip_ids = {256, 257};
    const Tokenizer tok = make_tokenizer(std::move(vocab));
    const auto ids = [&](std::string_view text, bool parse_special) {
        return tok.encode(text, AddSpecial::no, parse_special ? ParseSpecial::yes : ParseSpecial::no);
    };
    EXPECT_EQ(ids("<|end|> \n\t\xE3\x80\x80x", true), (Ids{256, 'x'}));  // U+3000 too
    EXPECT_EQ(ids("<|end|>\x1Cx", true), (Ids{256, 0x1C, 'x'}));         // U+001C is not White_Space
    EXPECT_EQ(ids("a</s>  ", false), (Ids{'a', 257}));                   // user-defined: matched either way
    EXPECT_EQ(ids("<|end|> ", false).size(), 8u);                        // not matched: nothing swallowed
    EXPECT_EQ(tok.decode(ids("x<|end|>\n y", true)), "x<|end|>y");
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, VocabParity, ::testing::ValuesIn(kVocabs),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             std::string name = info.param;
                             for (char& c : name) {
                                 if (c == '-') c = '_';
                             }
                             return name;
                         });

}  // namespace
}  // namespace kvstash
