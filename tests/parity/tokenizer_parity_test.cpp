// The tokenizer built from the default model's GGUF vocabulary against Hugging Face.
// Oracle: tests/fixtures/tokenizer/smollm2_corpus.json, written by
// tests/reference/make_tokenizer_corpus.py (see there for what each field holds).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "kvstash/tokenizer.h"
#include "support/encode_scaling.h"
#include "support/paths.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_access.h"
#include "tokenizer/vocabulary.h"

namespace kvstash {
namespace {

using nlohmann::json;

json load_corpus() {
    const std::string path = test::fixture_path("tokenizer/smollm2_corpus.json");
    std::ifstream in(path);
    if (!in) ADD_FAILURE() << "cannot open " << path;
    return json::parse(in);
}

std::string from_hex(const std::string& hex) {
    std::string bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return bytes;
}

// `bytes` less the bytes the vocabulary has no token for: those are dropped by encode (as HF and
// llama.cpp drop them), so they cannot come back from decode.
std::string spellable(const Tokenizer& tok, const std::string& bytes) {
    std::string out;
    for (char c : bytes) {
        if (!tok.encode(std::string(1, c), AddSpecial::no, ParseSpecial::no).empty()) out += c;
    }
    return out;
}

std::string show(const std::vector<int32_t>& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size() && i < 40; ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
    return s + (ids.size() > 40 ? ", ...]" : "]");
}

class TokenizerParity : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (test::default_model_status() != test::ModelStatus::present) return;
        const auto file = gguf::File::open(test::default_model_path());
        tokenizer_ = new Tokenizer(make_tokenizer(vocabulary_from_gguf(*file)));
    }
    static void TearDownTestSuite() {
        delete tokenizer_;
        tokenizer_ = nullptr;
    }
    static Tokenizer* tokenizer_;
};
Tokenizer* TokenizerParity::tokenizer_ = nullptr;

// Every corpus string: ids equal to SmolLM2's tokenizer.json pipeline (which is transformers' GGUF
// tokenizer except on the strings recorded under ids_tokenizer_json; see the generator), with and
// without parsing special tokens, and decode(encode(s)) == s.
TEST_F(TokenizerParity, SmolLM2CorpusMatchesHuggingFace) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const Tokenizer& tok = *tokenizer_;
    const json corpus = load_corpus();
    int total = 0, matched = 0, matched_plain = 0, matched_transformers = 0, round_trips = 0;
    for (const json& entry : corpus["entries"]) {
        if (entry.contains("hex")) continue;
        const std::string text = entry["text"];
        const auto transformers_ids = entry["ids"].get<std::vector<int32_t>>();
        const auto expected = entry.value("ids_tokenizer_json", transformers_ids);
        const auto transformers_plain = entry.value("ids_plain", transformers_ids);
        const auto expected_plain = entry.value("ids_plain_tokenizer_json", transformers_plain);

        const std::vector<int32_t> ids = tok.encode(text, AddSpecial::no, ParseSpecial::yes);
        const std::vector<int32_t> plain = tok.encode(text, AddSpecial::no, ParseSpecial::no);
        ++total;
        matched += ids == expected;
        matched_plain += plain == expected_plain;
        matched_transformers += ids == transformers_ids;
        EXPECT_EQ(ids, expected) << "text: \"" << text.substr(0, 200) << "\"\n  kvstash: " << show(ids)
                                 << "\n  HF:      " << show(expected);
        EXPECT_EQ(plain, expected_plain) << "parse_special=false, text: \"" << text.substr(0, 200) << "\"";
        const std::string kept = spellable(tok, text);
        const bool round_trip = tok.decode(ids) == kept && tok.decode(plain) == kept;
        round_trips += round_trip;
        EXPECT_TRUE(round_trip) << "decode(encode(s)) != s for \"" << text.substr(0, 200) << "\"";
    }
    std::cout << "[ parity   ] SmolLM2 tokenizer: " << matched << "/" << total
              << " match HF tokenizer.json pipeline (parse_special), " << matched_plain << "/" << total
              << " without parsing specials; " << matched_transformers << "/" << total
              << " match transformers' GGUF tokenizer (" << corpus["tokenizer_json_disagreements"].get<int>()
              << " known differences: it lacks SmolLM2's Digits pre-tokenizer); " << round_trips << "/" << total
              << " round-trip\n";
    EXPECT_GE(total, 1000);
    RecordProperty("matched", matched);
    RecordProperty("total", total);
}

// The corpus and long texts of tests/reference/make_smollm2_fixtures.py (an independent generator:
// transformers' GGUF tokenizer with SmolLM2's Digits pre-tokenizer restored), when present.
TEST_F(TokenizerParity, SmolLM2FixtureCorpusAndLongTexts) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const Tokenizer& tok = *tokenizer_;
    int checked = 0;
    const std::string corpus_path = test::fixture_path("smollm2/tokenizer_corpus.json");
    if (std::ifstream in(corpus_path); in) {
        const json corpus = json::parse(in);
        int total = 0, matched = 0;
        for (const json& entry : corpus["entries"]) {
            const std::string text = entry["text"];
            const auto expected = entry["ids"].get<std::vector<int32_t>>();
            const auto expected_plain = entry.value("ids_no_special", expected);
            const std::vector<int32_t> ids = tok.encode(text, AddSpecial::no, ParseSpecial::yes);
            const bool ok = ids == expected && tok.encode(text, AddSpecial::no, ParseSpecial::no) == expected_plain;
            ++total;
            matched += ok;
            EXPECT_TRUE(ok) << "text: \"" << text.substr(0, 200) << "\"\n  kvstash: " << show(ids)
                            << "\n  HF:      " << show(expected);
        }
        std::cout << "[ parity   ] smollm2/tokenizer_corpus.json: " << matched << "/" << total << "\n";
        ++checked;
    }
    // Long texts: the logits fixture's text, and the perplexity text (whole file).
    for (const char* name : {"smollm2/logits.json", "smollm2/perplexity.json"}) {
        std::ifstream in(test::fixture_path(name));
        if (!in) continue;
        const json doc = json::parse(in);
        std::string text;
        if (doc.contains("text")) {
            text = doc["text"];
        } else if (doc.contains("text_file")) {
            std::ifstream file(test::source_dir() + "/" + doc["text_file"].get<std::string>(), std::ios::binary);
            ASSERT_TRUE(file) << "cannot open " << doc["text_file"];
            text.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
        } else {
            continue;
        }
        const auto expected = doc["tokens"].get<std::vector<int32_t>>();
        const std::vector<int32_t> ids = tok.encode(text, AddSpecial::no, ParseSpecial::yes);
        size_t same = 0;
        while (same < ids.size() && same < expected.size() && ids[same] == expected[same]) ++same;
        std::cout << "[ parity   ] " << name << ": " << ids.size() << " tokens, HF " << expected.size()
                  << ", identical prefix " << same << "\n";
        EXPECT_EQ(ids, expected) << name << ": first difference at token " << same;
        EXPECT_EQ(tok.decode(ids), text);
        ++checked;
    }
    if (checked == 0) GTEST_SKIP() << "no tests/fixtures/smollm2/ tokenizer fixtures";
}

// Special ids and flags as the GGUF states them (gguf-py: bos_token_id 1, eos_token_id 2,
// add_bos_token false, 49152 tokens) and as HF builds them (<|im_end|> is EOS, no BOS added).
TEST_F(TokenizerParity, SmolLM2SpecialTokens) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const Tokenizer& tok = *tokenizer_;
    EXPECT_EQ(tok.n_vocab(), 49152);
    EXPECT_EQ(tok.bos(), 1);
    EXPECT_EQ(tok.eos(), 2);
    EXPECT_EQ(tokenizer_vocabulary(tok).model, "gpt2");
    EXPECT_EQ(tokenizer_vocabulary(tok).pre, "smollm");
    EXPECT_EQ(tok.encode("Hi", AddSpecial::yes, ParseSpecial::yes),
              tok.encode("Hi", AddSpecial::no, ParseSpecial::yes));
    EXPECT_TRUE(tok.is_eog(2));   // <|im_end|>
    EXPECT_TRUE(tok.is_eog(0));   // <|endoftext|>
    EXPECT_FALSE(tok.is_eog(1));  // <|im_start|>
    EXPECT_EQ(tok.token_piece(1), "<|im_start|>");
    EXPECT_EQ(tok.token_piece(216), " ");
    EXPECT_EQ(tok.token_piece(198), "\n");
}

// Malformed UTF-8 cannot be given to HF; it must encode without error and decode to the same bytes
// (less the bytes no token spells, SmolLM2: 0xC0 0xC1 0xF1 0xF2 0xF5-0xFF and a few controls).
TEST_F(TokenizerParity, MalformedUtf8RoundTrips) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const Tokenizer& tok = *tokenizer_;
    int count = 0;
    const json corpus = load_corpus();
    for (const json& entry : corpus["entries"]) {
        if (!entry.contains("hex")) continue;
        const std::string bytes = from_hex(entry["hex"]);
        for (bool parse_special : {true, false}) {
            const std::vector<int32_t> ids =
                tok.encode(bytes, AddSpecial::no, parse_special ? ParseSpecial::yes : ParseSpecial::no);
            const std::string kept = spellable(tok, bytes);
            EXPECT_EQ(tok.decode(ids), kept) << "hex " << entry["hex"];
            std::string streamed;
            for (int32_t id : ids) streamed += tok.token_piece(id);
            EXPECT_EQ(streamed, kept);
        }
        ++count;
    }
    EXPECT_GE(count, 10);
    // Bytes that are not UTF-8 but do have a token (stray continuation bytes) survive exactly.
    const std::string stray = "a\x80\xbf b\xc3(";
    EXPECT_EQ(tok.decode(tok.encode(stray, AddSpecial::no, ParseSpecial::yes)), stray);
}

// The pre-tokenizer regexes against HF tokenizers' Split(Regex, "isolated") for the Llama 3, Qwen2
// and GPT-2 patterns (no vocabulary needed): same piece boundaries. Texts with code points that
// Unicode 14 leaves unassigned are counted apart: PCRE2 10.42 knows Unicode 14, HF's Oniguruma a
// newer one, so a letter added since (CJK extension H/I, hieroglyph extension) classifies differently.
TEST(PreTokenizerParity, SplitsMatchHuggingFace) {
    const json corpus = load_corpus();
    int total = 0, matched = 0, newer_total = 0, newer_matched = 0;
    for (const char* name : {"llama-bpe", "qwen2", "gpt2"}) {
        const tokenization::PreTokenizer pre(name);
        for (const json& entry : corpus["entries"]) {
            if (!entry.contains("splits")) continue;
            const std::string text = entry["text"];
            const auto expected = entry["splits"][name].get<std::vector<size_t>>();
            std::vector<std::string_view> pieces;
            pre.split(text, pieces);
            std::vector<size_t> ends;
            for (std::string_view piece : pieces)
                ends.push_back(static_cast<size_t>(piece.data() + piece.size() - text.data()));
            if (entry.contains("unassigned")) {
                ++newer_total;
                newer_matched += ends == expected;
                continue;
            }
            ++total;
            matched += ends == expected;
            EXPECT_EQ(ends, expected) << name << " on \"" << text.substr(0, 200) << "\"";
        }
    }
    std::cout << "[ parity   ] pre-tokenizer splits (llama-bpe, qwen2, gpt2): " << matched << "/" << total
              << "; texts with code points unassigned in Unicode 14 (not required): " << newer_matched << "/"
              << newer_total << "\n";
}

// Speed: a 100 KB mixed text (the corpus concatenated) encodes in near-linear time (support/encode_scaling.h).
TEST_F(TokenizerParity, Encodes100KilobytesQuickly) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const Tokenizer& tok = *tokenizer_;
    std::string text;
    const json corpus = load_corpus();
    while (text.size() < 100 * 1024) {
        for (const json& entry : corpus["entries"]) {
            if (entry.contains("text")) text += entry["text"].get<std::string>() + "\n";
        }
    }
    text.resize(100 * 1024);  // may cut a character: the tokenizer takes any bytes
    const std::vector<int32_t> ids = test::expect_near_linear_encoding(tok, text, "the corpus");
    EXPECT_EQ(tok.decode(ids), spellable(tok, text));
}

// Inputs that defeat a quadratic BPE or regex: one 100 KB word, 100 KB of one whitespace, digits,
// pseudo-random bytes, back-to-back special tokens, in near-linear time (support/encode_scaling.h).
TEST_F(TokenizerParity, PathologicalInputsStayFast) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const Tokenizer& tok = *tokenizer_;
    const size_t n = 100 * 1024;
    std::string random_bytes(n, '\0');
    uint32_t state = 12345;
    for (char& c : random_bytes) {
        state = state * 1664525u + 1013904223u;
        c = static_cast<char>(state >> 24);
    }
    std::string specials;
    while (specials.size() < n) specials += "<|im_start|><|im_end|>";
    const std::pair<const char*, std::string> inputs[] = {
        {"one word", std::string(n, 'a')}, {"spaces", std::string(n, ' ')}, {"newlines", std::string(n, '\n')},
        {"digits", std::string(n, '7')},   {"random bytes", random_bytes},  {"special tokens", specials},
    };
    for (const auto& [name, text] : inputs) {
        const std::vector<int32_t> ids = test::expect_near_linear_encoding(tok, text, name);
        EXPECT_EQ(tok.decode(ids), spellable(tok, text)) << name;
    }
}

}  // namespace
}  // namespace kvstash
