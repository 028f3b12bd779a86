// TextStream on a hand-made byte-level vocabulary (token b < 256 is the byte b; then a few multi-byte
// tokens and an end-of-generation token): stop strings across token boundaries, hold-back of a possible
// stop-string start and of an incomplete UTF-8 character, the end of generation. A property test checks
// the stream against a direct computation on random byte streams.
#include "engine/text_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "kvstash/error.h"
#include "kvstash/tokenizer.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer_access.h"
#include "tokenizer/vocabulary.h"

namespace kvstash {
namespace {

constexpr int32_t kEog = 256;
constexpr int32_t kHello = 257;  // "hello"
constexpr int32_t kAbcd = 258;   // "abcd"
constexpr int32_t kEuro = 259;   // "€" (E2 82 AC)

Tokenizer make_byte_tokenizer() {
    Vocabulary v;
    v.model = "gpt2";
    v.pre = "gpt2";
    for (int b = 0; b < 256; ++b) v.tokens.push_back(tokenization::to_byte_level(std::string(1, static_cast<char>(b))));
    v.token_types.assign(256, static_cast<int32_t>(TokenType::normal));
    v.tokens.push_back("<|end|>");
    v.token_types.push_back(static_cast<int32_t>(TokenType::control));
    for (const char* text : {"hello", "abcd", "\xE2\x82\xAC"}) {
        v.tokens.push_back(tokenization::to_byte_level(text));
        v.token_types.push_back(static_cast<int32_t>(TokenType::normal));
    }
    v.eos_id = kEog;
    return make_tokenizer(std::move(v));
}

const Tokenizer& tokenizer() {
    static const Tokenizer instance = make_byte_tokenizer();
    return instance;
}

int32_t byte(char c) { return static_cast<uint8_t>(c); }

TEST(TextStream, TheVocabularyIsWhatTheTestsAssume) {
    EXPECT_EQ(tokenizer().token_piece(byte('a')), "a");
    EXPECT_EQ(tokenizer().token_piece(0xC3), "\xC3");
    EXPECT_EQ(tokenizer().token_piece(kHello), "hello");
    EXPECT_EQ(tokenizer().token_piece(kEuro), "\xE2\x82\xAC");
    EXPECT_TRUE(tokenizer().is_eog(kEog));
    EXPECT_FALSE(tokenizer().is_eog(kHello));
}

TEST(TextStream, StopStringAcrossTokens) {
    TextStream stream(tokenizer(), {"END"}, StopAtEndOfGeneration::yes);
    std::string shown;
    for (char c : std::string("abEN")) {
        ASSERT_EQ(stream.push(byte(c)), std::nullopt);
        shown += stream.take_ready();
    }
    EXPECT_EQ(shown, "ab") << "\"EN\" may still become \"END\": held back";
    EXPECT_EQ(stream.push(byte('D')), StopReason::stop_string);
    EXPECT_EQ(stream.text(), "ab");
    EXPECT_EQ(stream.take_rest(), "");
}

TEST(TextStream, HeldBackTextIsReleasedWhenItCannotStartTheStop) {
    TextStream stream(tokenizer(), {"END"}, StopAtEndOfGeneration::yes);
    EXPECT_EQ(stream.push(byte('E')), std::nullopt);
    EXPECT_EQ(stream.take_ready(), "");
    EXPECT_EQ(stream.push(byte('N')), std::nullopt);
    EXPECT_EQ(stream.take_ready(), "");
    EXPECT_EQ(stream.push(byte('x')), std::nullopt);
    EXPECT_EQ(stream.take_ready(), "ENx");
    EXPECT_EQ(stream.take_ready(), "") << "taken once";
}

TEST(TextStream, EarliestOfSeveralStopsInsideOneToken) {
    TextStream stream(tokenizer(), {"cd", "b"}, StopAtEndOfGeneration::yes);
    EXPECT_EQ(stream.push(kAbcd), StopReason::stop_string);
    EXPECT_EQ(stream.text(), "a");
    EXPECT_EQ(stream.take_rest(), "a");
}

TEST(TextStream, StopStartingInsideAHeldBackRun) {
    TextStream stream(tokenizer(), {"aab"}, StopAtEndOfGeneration::yes);
    std::string shown;
    for (char c : std::string("aaa")) {
        ASSERT_EQ(stream.push(byte(c)), std::nullopt);
        shown += stream.take_ready();
    }
    EXPECT_EQ(shown, "a");  // "aa" may start "aab"
    EXPECT_EQ(stream.push(byte('b')), StopReason::stop_string);
    EXPECT_EQ(stream.text(), "a");
    EXPECT_EQ(stream.take_rest(), "");
}

TEST(TextStream, IncompleteCharacterIsHeldBack) {
    TextStream stream(tokenizer(), {}, StopAtEndOfGeneration::yes);
    stream.push(byte('x'));
    stream.push(0xF0);
    EXPECT_EQ(stream.take_ready(), "x");
    stream.push(0x9F);
    stream.push(0x98);
    EXPECT_EQ(stream.take_ready(), "");
    stream.push(0x80);
    EXPECT_EQ(stream.take_ready(), "\xF0\x9F\x98\x80");
    stream.push(kEuro);
    EXPECT_EQ(stream.take_ready(), "\xE2\x82\xAC");
    // A byte that can never complete a character is not held back.
    stream.push(0xFF);
    EXPECT_EQ(stream.take_ready(), "\xFF");
}

TEST(TextStream, TheEndReleasesAnIncompleteCharacter) {
    TextStream stream(tokenizer(), {"\xC3\xA9!"}, StopAtEndOfGeneration::yes);
    stream.push(byte('a'));
    stream.push(0xC3);
    EXPECT_EQ(stream.take_ready(), "a");
    EXPECT_EQ(stream.take_rest(), "\xC3");
    EXPECT_EQ(stream.text(), "a\xC3");
}

TEST(TextStream, EndOfGeneration) {
    TextStream stopping(tokenizer(), {}, StopAtEndOfGeneration::yes);
    stopping.push(kHello);
    EXPECT_EQ(stopping.push(kEog), StopReason::end_of_generation);
    EXPECT_EQ(stopping.text(), "hello") << "the EOG token's text is never added";

    TextStream going_on(tokenizer(), {}, StopAtEndOfGeneration::no);
    EXPECT_EQ(going_on.push(kEog), std::nullopt);
    going_on.push(kHello);
    EXPECT_EQ(going_on.take_rest(), "hello");
}

TEST(TextStream, EmptyStopStringIsRefused) {
    try {
        TextStream stream(tokenizer(), {"x", ""}, StopAtEndOfGeneration::yes);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    }
}

// Whether continuation bytes appended to `part` can make it one well-formed UTF-8 character.
bool can_complete(const std::string& part) {
    static constexpr uint8_t kTry[] = {0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF};
    for (size_t more = 1; part.size() + more <= 4; ++more) {
        for (size_t combo = 0; combo < 216; ++combo) {
            std::string whole = part;
            for (size_t k = 0, c = combo; k < more; ++k, c /= 6) whole += static_cast<char>(kTry[c % 6]);
            if (utf8::sequence_length(whole, 0) == whole.size()) return true;
        }
    }
    return false;
}

// How much of `all` may be shown, stated directly: up to the first position from which the rest is a
// proper prefix of a stop string, then not the start of a character that can still be completed.
size_t expected_ready(const std::string& all, const std::vector<std::string>& stops) {
    size_t hold = all.size();
    for (size_t i = 0; i < all.size() && hold == all.size(); ++i) {
        for (const std::string& s : stops) {
            const size_t rest = all.size() - i;
            if (rest < s.size() && s.compare(0, rest, all, i, rest) == 0) hold = i;
        }
    }
    for (size_t k = hold >= 3 ? hold - 3 : 0; k < hold; ++k) {
        if (can_complete(all.substr(k, hold - k))) return k;
    }
    return hold;
}

// Random byte streams (a small alphabet, so stop strings and partial characters are frequent): after each
// token the text shown so far is what expected_ready allows; the stop comes at the token that completes
// the first occurrence, and the final text is everything before it.
TEST(TextStream, AgreesWithADirectComputationOnRandomStreams) {
    const std::vector<std::string> stops = {"\xC3\xA9x", "yy"};
    const std::vector<int32_t> alphabet = {byte('x'), byte('y'), 0xC3, 0xA9,  0xE2, 0x82,
                                           0xAC,      0xF0,      0x9F, kEuro, kAbcd};
    std::mt19937 rng(12);
    size_t stopped = 0;
    for (int round = 0; round < 3000; ++round) {
        TextStream stream(tokenizer(), stops, StopAtEndOfGeneration::yes);
        std::string all, shown;
        std::optional<StopReason> stop;
        for (int step = 0; step < 12 && !stop; ++step) {
            const int32_t token = alphabet[rng() % alphabet.size()];
            all += tokenizer().token_piece(token);
            stop = stream.push(token);
            size_t first = std::string::npos;
            for (const std::string& s : stops) first = std::min(first, all.find(s));
            ASSERT_EQ(stop.has_value(), first != std::string::npos) << testing::PrintToString(all);
            if (stop) {
                EXPECT_EQ(stream.text(), all.substr(0, first));
                ++stopped;
                break;
            }
            shown += stream.take_ready();
            // Exactly what is ready: neither less (held back too long) nor more (an incomplete character or a
            // possible start of a stop string shown).
            ASSERT_EQ(shown.size(), expected_ready(all, stops)) << testing::PrintToString(all);
            ASSERT_EQ(shown, all.substr(0, shown.size())) << testing::PrintToString(all);
        }
        shown += stream.take_rest();
        EXPECT_EQ(shown, stream.text());
    }
    EXPECT_GT(stopped, 200u);  // the stops are reached often enough to matter
}

}  // namespace
}  // namespace kvstash
