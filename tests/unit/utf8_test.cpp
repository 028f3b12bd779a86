// base/utf8: the library's one UTF-8 decoder/encoder/validator. Two oracles: sequences with their meaning
// in the Unicode standard (chapter 3.9, table 3-7 "Well-Formed UTF-8 Byte Sequences"), and CPython's
// strict codec recorded in tests/fixtures/utf8/python_decoder.txt by tests/reference/make_utf8_fixture.py.
#include "base/utf8.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/paths.h"

namespace kvstash {
namespace {

std::string from_hex(const std::string& hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return out;
}

size_t length_at_0(std::string_view s) { return utf8::sequence_length(s, 0); }

// One sequence of each shape of table 3-7 and its code point.
TEST(Utf8, DecodesEachWellFormedShape) {
    struct Case {
        const char* bytes;
        char32_t code_point;
    };
    for (const Case& c : std::vector<Case>{{"\x00", 0x0000},
                                           {"a", 0x0061},
                                           {"\x7F", 0x007F},
                                           {"\xC2\x80", 0x0080},  // C2..DF 80..BF
                                           {"\xC3\xA9", 0x00E9},  // é
                                           {"\xDF\xBF", 0x07FF},
                                           {"\xE0\xA0\x80", 0x0800},  // E0 A0..BF 80..BF
                                           {"\xE2\x82\xAC", 0x20AC},  // €
                                           {"\xED\x9F\xBF", 0xD7FF},  // ED 80..9F 80..BF: below surrogates
                                           {"\xEE\x80\x80", 0xE000},  // EE..EF 80..BF 80..BF
                                           {"\xEF\xBF\xBF", 0xFFFF},
                                           {"\xF0\x90\x80\x80", 0x10000},      // F0 90..BF 80..BF 80..BF
                                           {"\xF0\x9F\x98\x80", 0x1F600},      // 😀
                                           {"\xF3\xBF\xBF\xBF", 0xFFFFF},      // F1..F3 80..BF 80..BF 80..BF
                                           {"\xF4\x8F\xBF\xBF", 0x10FFFF}}) {  // F4 80..8F 80..BF 80..BF
        const std::string bytes = c.code_point == 0 ? std::string(1, '\0') : std::string(c.bytes);
        char32_t decoded = 0xFFFFFFFF;
        EXPECT_EQ(utf8::decode(bytes, 0, &decoded), bytes.size()) << std::hex << static_cast<uint32_t>(c.code_point);
        EXPECT_EQ(static_cast<uint32_t>(decoded), static_cast<uint32_t>(c.code_point));
        EXPECT_EQ(length_at_0(bytes), bytes.size());
        std::string encoded;
        utf8::append(encoded, c.code_point);
        EXPECT_EQ(encoded, bytes);
        EXPECT_TRUE(utf8::is_valid(bytes));
    }
}

TEST(Utf8, RefusesIllFormedSequences) {
    for (const char* bytes : {
             "\x80",              // stray continuation byte
             "\xBF",              //
             "\xC0\xAF",          // overlong '/' (C0, C1 never appear)
             "\xC1\xBF",          //
             "\xE0\x80\xAF",      // overlong 3-byte form (E0 needs A0..BF)
             "\xE0\x9F\xBF",      //
             "\xF0\x80\x80\xAF",  // overlong 4-byte form (F0 needs 90..BF)
             "\xF0\x8F\xBF\xBF",  //
             "\xED\xA0\x80",      // U+D800, a surrogate (ED needs 80..9F)
             "\xED\xBF\xBF",      // U+DFFF
             "\xF4\x90\x80\x80",  // U+110000 (F4 needs 80..8F)
             "\xF5\x80\x80\x80",  // F5..FF never appear
             "\xF8\x88\x80\x80\x80",
             "\xFF",
             "\xE2\x82",      // truncated
             "\xF0\x9F\x98",  //
             "\xC3",          //
             "\xE2\x41\x82",  // continuation replaced by ASCII
             "\xC3\xC3",      //
         }) {
        const std::string s(bytes);
        char32_t decoded = 0x41;
        EXPECT_EQ(length_at_0(s), 0u) << testing::PrintToString(s);
        EXPECT_EQ(utf8::decode(s, 0, &decoded), 0u);
        EXPECT_EQ(static_cast<uint32_t>(decoded), 0x41u) << "left alone";
        EXPECT_EQ(utf8::valid_prefix_length("ok" + s), 2u);
        EXPECT_FALSE(utf8::is_valid(s));
    }
}

TEST(Utf8, ValidPrefixStopsAtTheFirstBadByte) {
    EXPECT_EQ(utf8::valid_prefix_length(""), 0u);
    EXPECT_EQ(utf8::valid_prefix_length("caf\xC3\xA9"), 5u);
    EXPECT_EQ(utf8::valid_prefix_length("caf\xC3\xA9\xFF"
                                        "abc"),
              5u);
    EXPECT_EQ(utf8::valid_prefix_length("a\xE2\x82\xAC\xE2\x82"), 4u);
}

TEST(Utf8, IncompleteTailLength) {
    using utf8::incomplete_tail_length;
    EXPECT_EQ(incomplete_tail_length(""), 0u);
    EXPECT_EQ(incomplete_tail_length("abc"), 0u);
    EXPECT_EQ(incomplete_tail_length("a\xC3"), 1u);
    EXPECT_EQ(incomplete_tail_length("a\xC3\xA9"), 0u);
    EXPECT_EQ(incomplete_tail_length("\xE2"), 1u);
    EXPECT_EQ(incomplete_tail_length("\xE2\x82"), 2u);
    EXPECT_EQ(incomplete_tail_length("x\xE2\x82\xAC"), 0u);
    EXPECT_EQ(incomplete_tail_length("\xF0\x9F\x98"), 3u);
    EXPECT_EQ(incomplete_tail_length("\xF0\x9F\x98\x80"), 0u);
    EXPECT_EQ(incomplete_tail_length("\xF0\x9F"), 2u);
    // Never completable: count as complete.
    EXPECT_EQ(incomplete_tail_length("\x80"), 0u);  // stray continuation
    EXPECT_EQ(incomplete_tail_length("a\x80\x80\x80"), 0u);
    EXPECT_EQ(incomplete_tail_length("\xC0"), 0u);      // overlong lead
    EXPECT_EQ(incomplete_tail_length("\xF5"), 0u);      // past U+10FFFF
    EXPECT_EQ(incomplete_tail_length("\xE0\x80"), 0u);  // overlong 3-byte form
    EXPECT_EQ(incomplete_tail_length("\xED\xA0"), 0u);  // surrogate
    EXPECT_EQ(incomplete_tail_length("\xF4\x90"), 0u);  // > U+10FFFF
    EXPECT_EQ(incomplete_tail_length("\xE2\x41"), 0u);  // lead then ASCII
    EXPECT_EQ(incomplete_tail_length("\xE0\xA0"), 2u);
}

TEST(Utf8, CharacterStartAtOrBefore) {
    const std::string s =
        "a\xE2\x82\xAC"
        "b";  // a € b: bytes 0 | 1 2 3 | 4
    EXPECT_EQ(utf8::character_start_at_or_before(s, 0), 0u);
    EXPECT_EQ(utf8::character_start_at_or_before(s, 1), 1u);
    EXPECT_EQ(utf8::character_start_at_or_before(s, 2), 1u);
    EXPECT_EQ(utf8::character_start_at_or_before(s, 3), 1u);
    EXPECT_EQ(utf8::character_start_at_or_before(s, 4), 4u);
    EXPECT_EQ(utf8::character_start_at_or_before(s, 5), 5u);
    EXPECT_EQ(utf8::character_start_at_or_before("\x80\x80", 1), 0u);
}

// Every line of the CPython fixture: the valid prefix, the code points in it, the byte after it (not the
// start of a sequence), the bytes held back at the end; and encodings of code points across the range.
TEST(Utf8, AgreesWithPythonsDecoder) {
    std::ifstream in(test::fixture_path("utf8/python_decoder.txt"));
    ASSERT_TRUE(in) << "missing fixture; run tests/reference/make_utf8_fixture.py";
    size_t decoded_lines = 0, encoded_lines = 0;
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream fields(line);
        std::string kind, hex;
        fields >> kind >> hex;
        const std::string bytes = from_hex(hex);
        if (kind == "e") {
            const auto code_point = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
            std::string expected_hex;
            fields >> expected_hex;
            std::string encoded;
            utf8::append(encoded, code_point);
            EXPECT_EQ(encoded, from_hex(expected_hex)) << line;
            char32_t back = 0;
            EXPECT_EQ(utf8::decode(encoded, 0, &back), encoded.size()) << line;
            EXPECT_EQ(static_cast<uint32_t>(back), static_cast<uint32_t>(code_point)) << line;
            ++encoded_lines;
            continue;
        }
        size_t valid = 0, held = 0;
        std::string code_points;
        fields >> valid >> held >> code_points;
        EXPECT_EQ(utf8::valid_prefix_length(bytes), valid) << line;
        EXPECT_EQ(utf8::incomplete_tail_length(bytes), held) << line;
        std::string got;
        for (size_t pos = 0; pos < valid;) {
            char32_t c = 0;
            const size_t n = utf8::decode(bytes, pos, &c);
            ASSERT_GT(n, 0u) << line;
            std::ostringstream h;
            h << std::hex << static_cast<uint32_t>(c);
            if (!got.empty()) got += ',';
            got += h.str();
            pos += n;
        }
        EXPECT_EQ(got.empty() ? "-" : got, code_points) << line;
        if (valid < bytes.size()) {
            EXPECT_EQ(utf8::sequence_length(bytes, valid), 0u) << line;
        }
        ++decoded_lines;
    }
    EXPECT_GT(decoded_lines, 5000u);
    EXPECT_GT(encoded_lines, 200u);
}

}  // namespace
}  // namespace kvstash
