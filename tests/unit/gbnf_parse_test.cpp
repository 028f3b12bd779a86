// The GBNF parser: the rule table it builds for small grammars (checked element by element, from the
// syntax's definition in gbnf_parse.h) and its errors (line, column, what was expected).
#include <gtest/gtest.h>

#include <string>

#include "grammar/gbnf_parse.h"
#include "kvstash/error.h"

namespace kvstash::grammar {
namespace {

using T = ElementType;

std::string error_of(const std::string& text) {
    try {
        parse_gbnf(text);
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
        return e.what();
    }
    return "";
}

TEST(GbnfParse, LiteralsClassesAndAlternatives) {
    const ParsedGrammar g = parse_gbnf("root ::= \"ab\" | [x-z0] | [^\\n] .\n");
    ASSERT_EQ(g.rule_names.size(), 1u);
    EXPECT_EQ(g.rule_names[0], "root");
    EXPECT_EQ(g.root, 0);
    const std::vector<std::pair<T, uint32_t>> want = {
        {T::chr, 'a'},     {T::chr, 'b'}, {T::alt, 0},        {T::chr, 'x'},   {T::chr_range_upper, 'z'},
        {T::chr_alt, '0'}, {T::alt, 0},   {T::chr_not, '\n'}, {T::chr_any, 0}, {T::end, 0}};
    ASSERT_EQ(g.elements.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(g.elements[i].type, want[i].first) << i;
        EXPECT_EQ(g.elements[i].value, want[i].second) << i;
    }
}

TEST(GbnfParse, EscapesAndUtf8) {
    const ParsedGrammar g = parse_gbnf("root ::= \"\\x41\\u00e9\\U0001F600\\t\\\"\\\\\" \"é\"");
    std::vector<uint32_t> cps;
    for (const Element& e : g.elements) {
        if (e.type == T::chr) cps.push_back(e.value);
    }
    EXPECT_EQ(cps, (std::vector<uint32_t>{0x41, 0xE9, 0x1F600, '\t', '"', '\\', 0xE9}));
}

TEST(GbnfParse, RepetitionsBecomeRules) {
    // x* -> R ::= x R | ; x{1,2} -> x R2 with R2 ::= x | ;  both refer to generated rules.
    const ParsedGrammar g = parse_gbnf("root ::= \"a\"* \"b\"{1,2}  # comment\n");
    EXPECT_EQ(g.rule_names.size(), 3u);
    const Element* root = &g.elements[g.rule_start[0]];
    EXPECT_EQ(root[0].type, T::rule_ref);
    EXPECT_EQ(root[1].type, T::chr);
    EXPECT_EQ(root[1].value, 'b');
    EXPECT_EQ(root[2].type, T::rule_ref);
    EXPECT_EQ(root[3].type, T::end);
    const Element* star = &g.elements[g.rule_start[root[0].value]];
    EXPECT_EQ(star[0].value, 'a');
    EXPECT_EQ(star[1].type, T::rule_ref);
    EXPECT_EQ(star[1].value, root[0].value);  // R refers to itself
    EXPECT_EQ(star[2].type, T::alt);
    EXPECT_EQ(star[3].type, T::end);  // the empty alternative
}

TEST(GbnfParse, MultiLineRulesAndGroups) {
    const ParsedGrammar g = parse_gbnf("root ::=\n  a |\n  ( b\n    c )\na ::= \"a\"\nb ::= \"b\"\nc ::= \"c\"\n");
    EXPECT_EQ(g.rule_names[g.root], "root");
    EXPECT_EQ(g.rule_names.size(), 5u);  // root, a, b, c, the group
}

TEST(GbnfParse, ErrorsNameLineAndColumn) {
    EXPECT_NE(error_of("root ::= \"a\"\nfoo ::= [ab\n").find("line 2, column 12: unterminated character class"),
              std::string::npos);
    EXPECT_NE(error_of("root ::= \"abc").find("line 1, column 14: unterminated string"), std::string::npos);
    EXPECT_NE(error_of("root := \"a\"").find("line 1, column 6: expected '::='"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"a\" )").find("line 1, column 14: unexpected ')'"), std::string::npos);
    EXPECT_NE(error_of("root ::= x\n").find("rule 'x' is used but not defined"), std::string::npos);
    EXPECT_NE(error_of("rot ::= \"x\"\n").find("no 'root' rule"), std::string::npos);
    EXPECT_NE(error_of("root ::= * \"x\"").find("nothing before it to repeat"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
    EXPECT_NE(error_of("root ::= [z-a]").find("upper end below"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"a\"{3,2}").find("n < m"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
    EXPECT_NE(error_of("root ::= []").find("empty character class"), std::string::npos);
}

TEST(GbnfParse, LeftRecursionIsRefused) {
    EXPECT_NE(error_of("root ::= root \"x\" | \"y\"").find("'root' is left-recursive"), std::string::npos);
    EXPECT_NE(error_of("root ::= a\na ::= b \"x\"\nb ::= \"\" | a").find("left-recursive"), std::string::npos);
    EXPECT_NE(error_of("root ::= (\"a\"?)*").find("left-recursive"), std::string::npos);  // x* with x nullable
    EXPECT_EQ(error_of("root ::= \"x\" root | \"y\""), "");                               // right recursion is fine
}

TEST(GbnfParse, ClassHelpers) {
    const ParsedGrammar g = parse_gbnf("root ::= [a-cx] [^0-9] .");
    const int32_t pos_class = 0, neg_class = class_end(g.elements, 0), any = class_end(g.elements, neg_class);
    EXPECT_TRUE(class_matches(g.elements, pos_class, 'b'));
    EXPECT_TRUE(class_matches(g.elements, pos_class, 'x'));
    EXPECT_FALSE(class_matches(g.elements, pos_class, 'd'));
    EXPECT_FALSE(class_matches(g.elements, neg_class, '5'));
    EXPECT_TRUE(class_matches(g.elements, neg_class, 0x4E2D));
    EXPECT_TRUE(class_matches(g.elements, any, 0x10FFFF));
    EXPECT_TRUE(class_intersects(g.elements, pos_class, 'c', 'w'));
    EXPECT_FALSE(class_intersects(g.elements, pos_class, 'd', 'w'));
    EXPECT_FALSE(class_intersects(g.elements, neg_class, '0', '9'));
    EXPECT_TRUE(class_intersects(g.elements, neg_class, '0', ':'));
}

}  // namespace
}  // namespace kvstash::grammar
