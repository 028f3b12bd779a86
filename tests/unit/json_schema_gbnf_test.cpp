// JSON Schema -> GBNF: documents that a schema allows are accepted by the converted grammar and
// documents it forbids are not (expected verdicts from the JSON Schema spec, by hand); unsupported
// keywords are refused by name.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "grammar/gbnf_parse.h"
#include "grammar/grammar_matcher.h"
#include "grammar/json_schema_gbnf.h"
#include "kvstash/error.h"

namespace kvstash::grammar {
namespace {

bool accepts(const std::string& gbnf, const std::string& text) {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
    auto trie = std::make_shared<TokenTrie>(pieces, std::vector<uint8_t>{}, std::vector<int32_t>{});
    GrammarMatcher m(std::make_shared<ParsedGrammar>(parse_gbnf(gbnf)), trie);
    return m.accept_bytes(text) && m.can_end();
}

bool schema_accepts(const std::string& schema, const std::string& text) {
    return accepts(json_schema_to_gbnf(schema), text);
}

std::string error_of(const std::string& schema, ErrorCode code) {
    try {
        json_schema_to_gbnf(schema);
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        return e.what();
    }
    return "";
}

TEST(JsonSchemaGbnf, Primitives) {
    EXPECT_TRUE(schema_accepts(R"({"type":"integer"})", "-12"));
    EXPECT_FALSE(schema_accepts(R"({"type":"integer"})", "1.5"));
    EXPECT_FALSE(schema_accepts(R"({"type":"integer"})", "012"));
    EXPECT_TRUE(schema_accepts(R"({"type":"number"})", "1.5e-3"));
    EXPECT_TRUE(schema_accepts(R"({"type":"string"})", R"("a\"b\u00e9 é")"));
    EXPECT_FALSE(schema_accepts(R"({"type":"string"})", "\"a\nb\""));  // raw control character
    EXPECT_TRUE(schema_accepts(R"({"type":"boolean"})", "false"));
    EXPECT_TRUE(schema_accepts(R"({"type":"null"})", "null"));
    EXPECT_TRUE(schema_accepts(R"({"type":["string","null"]})", "null"));
    EXPECT_FALSE(schema_accepts(R"({"type":["string","null"]})", "1"));
    EXPECT_TRUE(schema_accepts(R"({})", R"([1, {"a": null}])"));
}

TEST(JsonSchemaGbnf, ObjectsInSchemaOrder) {
    const std::string s =
        R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},)"
        R"("nick":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","age"]})";
    EXPECT_TRUE(schema_accepts(s, R"({"name": "a", "age": 3})"));
    EXPECT_TRUE(schema_accepts(s, R"({"name":"a","age":3,"tags":["x"]})"));
    EXPECT_TRUE(schema_accepts(s, R"({"name":"a","age":3,"nick":"b","tags":[]})"));
    EXPECT_FALSE(schema_accepts(s, R"({"name":"a"})"));                // age required
    EXPECT_FALSE(schema_accepts(s, R"({"name":"a","age":"3"})"));      // wrong type
    EXPECT_FALSE(schema_accepts(s, R"({"name":"a","age":3,"x":1})"));  // no other keys (documented)
    EXPECT_FALSE(schema_accepts(s, R"({"name":"a","age":3,})"));
    const std::string all_optional =
        R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}})";
    EXPECT_TRUE(schema_accepts(all_optional, "{}"));
    EXPECT_TRUE(schema_accepts(all_optional, R"({"b": 1})"));
    EXPECT_TRUE(schema_accepts(all_optional, R"({"a": 1, "b": 2})"));
    EXPECT_FALSE(schema_accepts(all_optional, R"({, "b": 1})"));
    const std::string map = R"({"type":"object","additionalProperties":{"type":"number"}})";
    EXPECT_TRUE(schema_accepts(map, R"({"x": 1, "y": 2.5})"));
    EXPECT_FALSE(schema_accepts(map, R"({"x": "1"})"));
    EXPECT_TRUE(schema_accepts(R"({"type":"object"})", R"({"x": [true]})"));
}

TEST(JsonSchemaGbnf, ArraysEnumsConstsRefs) {
    const std::string arr = R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2})";
    EXPECT_FALSE(schema_accepts(arr, "[]"));
    EXPECT_TRUE(schema_accepts(arr, "[1]"));
    EXPECT_TRUE(schema_accepts(arr, "[1, 2]"));
    EXPECT_FALSE(schema_accepts(arr, "[1, 2, 3]"));
    EXPECT_TRUE(schema_accepts(R"({"enum":["red","green",3,null]})", "\"green\""));
    EXPECT_TRUE(schema_accepts(R"({"enum":["red","green",3,null]})", "3"));
    EXPECT_FALSE(schema_accepts(R"({"enum":["red","green",3,null]})", "\"blue\""));
    EXPECT_TRUE(schema_accepts(R"({"const":{"a":1}})", R"({"a":1})"));
    EXPECT_TRUE(schema_accepts(R"({"anyOf":[{"type":"integer"},{"type":"string"}]})", "\"x\""));
    const std::string tree =
        R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},)"
        R"("kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}}})";
    EXPECT_TRUE(schema_accepts(tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]})"));
    EXPECT_FALSE(schema_accepts(tree, R"({"v": 1, "kids": [{}]})"));
}

TEST(JsonSchemaGbnf, StringFormatsAndLengths) {
    EXPECT_TRUE(schema_accepts(R"({"type":"string","format":"date"})", "\"2024-02-28\""));
    EXPECT_FALSE(schema_accepts(R"({"type":"string","format":"date"})", "\"2024-13-01\""));
    EXPECT_FALSE(schema_accepts(R"({"type":"string","format":"date"})", "\"0000-01-01\""));  // no year 0
    EXPECT_FALSE(schema_accepts(R"({"type":"string","format":"date"})", "\"2023-04-31\""));
    EXPECT_FALSE(schema_accepts(R"({"type":"string","format":"date"})", "\"2023-02-29\""));  // never the 29th
    EXPECT_TRUE(schema_accepts(R"({"type":"string","format":"date"})", "\"2023-12-31\""));
    EXPECT_TRUE(schema_accepts(R"({"type":"string","format":"uuid"})", "\"123e4567-e89b-12d3-a456-426614174000\""));
    EXPECT_FALSE(schema_accepts(R"({"type":"string","format":"uuid"})", "\"123e4567\""));
    EXPECT_TRUE(schema_accepts(R"({"type":"string","format":"date-time"})", "\"2024-01-02T03:04:05Z\""));
    EXPECT_TRUE(schema_accepts(R"({"type":"string","minLength":2,"maxLength":3})", "\"éé\""));
    EXPECT_FALSE(schema_accepts(R"({"type":"string","minLength":2,"maxLength":3})", "\"abcd\""));
}

TEST(JsonSchemaGbnf, UnsupportedKeywordsAreNamed) {
    const std::string e = error_of(
        R"({"type":"object","properties":{"n":{"type":"integer","minimum":0},"s":{"type":"string","pattern":"a+"}}})",
        ErrorCode::unsupported);
    EXPECT_NE(e.find("/properties/n/minimum"), std::string::npos) << e;
    EXPECT_NE(e.find("/properties/s/pattern"), std::string::npos) << e;
    EXPECT_NE(error_of(R"({"type":"string","format":"email"})", ErrorCode::unsupported).find("format 'email'"),
              std::string::npos);
    EXPECT_NE(error_of(R"({"oneOf":[{}]})", ErrorCode::unsupported).find("/oneOf"), std::string::npos);
    EXPECT_NE(error_of("{", ErrorCode::invalid_argument).find("not valid JSON"), std::string::npos);
    EXPECT_NE(error_of(R"({"$ref":"#/$defs/x"})", ErrorCode::invalid_argument).find("not defined"), std::string::npos);
    EXPECT_NE(error_of(R"({"type":"array","minItems":3,"maxItems":2})", ErrorCode::invalid_argument).find("minItems"),
              std::string::npos);
    EXPECT_EQ(error_of(R"({"title":"t","description":"d","type":"string"})", ErrorCode::unsupported), "");
}

TEST(JsonSchemaGbnf, JsonObjectGrammar) {
    EXPECT_TRUE(accepts(json_object_gbnf(), R"({"a": [1, "x", {"b": null}]})"));
    EXPECT_FALSE(accepts(json_object_gbnf(), "[1]"));
    EXPECT_FALSE(accepts(json_object_gbnf(), "{\"a\": 1} x"));
}

}  // namespace
}  // namespace kvstash::grammar
