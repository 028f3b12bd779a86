// Issue 34, items 1-3 and 9: hostile nesting, repetition and size in the parsers of user-supplied trees —
// GBNF, JSON Schema, a model directory's config.json, and the JSON depth pre-scan they share — each
// refused with an Error naming the limit instead of overflowing the stack or the memory. The seeds of
// tests/fuzz/corpus/{grammar,json_schema,hf_config} run through the same parsers (the libFuzzer target
// tests/fuzz/structured_fuzz.cpp needs clang; this runs its corpus in every build).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/json_depth.h"
#include "fuzz/hf_directory_input.h"
#include "grammar/gbnf_parse.h"
#include "grammar/grammar_matcher.h"
#include "grammar/json_schema_gbnf.h"
#include "kvstash/error.h"
#include "kvstash/grammar.h"
#include "model/hf_config.h"

namespace kvstash {
namespace {

std::string repeat(const std::string& s, size_t n) {
    std::string out;
    out.reserve(s.size() * n);
    for (size_t i = 0; i < n; ++i) out += s;
    return out;
}

// Runs f and returns the Error's message (fails the test when none is thrown or the code differs).
template <typename F>
std::string error_of(F&& f, ErrorCode code = ErrorCode::invalid_argument) {
    try {
        f();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "no Error thrown";
    return "";
}

TEST(JsonDepth, CountsBracketsOutsideStrings) {
    EXPECT_EQ(json_depth::nesting_depth("{}"), 1u);
    EXPECT_EQ(json_depth::nesting_depth(R"({"a": [1, {"b": []}]})"), 4u);
    EXPECT_EQ(json_depth::nesting_depth(R"(["[[[[", "\"[[["])"), 1u);
    EXPECT_EQ(json_depth::nesting_depth("42"), 0u);
    EXPECT_EQ(json_depth::nesting_depth(repeat("[", 1000000), 300), 301u);  // stops counting past the limit
    EXPECT_NO_THROW(json_depth::require_depth_at_most(repeat("[", 256) + repeat("]", 256), "x"));
    const std::string m = error_of([] { json_depth::require_depth_at_most(repeat("[", 257), "the body"); });
    EXPECT_NE(m.find("the body nests arrays/objects deeper than 256 levels"), std::string::npos) << m;
}

TEST(HostileGbnf, DeeplyNestedGroupsAreRefused) {
    // 50k nested parentheses overflowed the stack (SIGSEGV) before the limit.
    const std::string gbnf = "root ::= " + repeat("(", 50000) + "\"x\"" + repeat(")", 50000);
    const std::string m = error_of([&] { grammar::parse_gbnf(gbnf); });
    EXPECT_NE(m.find("nested deeper than 256"), std::string::npos) << m;
    const std::string ok = "root ::= " + repeat("(", 200) + "\"x\"" + repeat(")", 200);
    EXPECT_NO_THROW(grammar::parse_gbnf(ok));
}

TEST(HostileGbnf, StackedRepetitionsAreBoundedBeforeExpansion) {
    // "x"{10000}{10000} took 7.4 s and 2.9 GB; three levels reached std::bad_alloc.
    for (const char* gbnf :
         {"root ::= \"x\"{10000}{10000}", "root ::= \"x\"{10000}{10000}{10000}", "root ::= \"abcd\"{1000,2000}{500}"}) {
        const std::string m = error_of([&] { grammar::parse_gbnf(gbnf); });
        EXPECT_NE(m.find("expands to more than"), std::string::npos) << m;
    }
    EXPECT_NO_THROW(grammar::parse_gbnf("root ::= \"x\"{100}{100}"));
    EXPECT_NO_THROW(grammar::parse_gbnf("root ::= [a-z]{0,10000}"));
    EXPECT_NO_THROW(grammar::parse_gbnf("root ::= (\"ab\"{0,10000}){0,10000}"));  // a group is one reference
}

TEST(HostileGbnf, LongChainOfRulesMatchesWithoutRecursion) {
    // r0 ::= r1 "a", r1 ::= r2 "a", ...: expanding r0 went one C++ frame per rule (a stack overflow at ~100k).
    constexpr int kRules = 100000;
    std::string gbnf = "root ::= r0\n";
    for (int i = 0; i < kRules; ++i) gbnf += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"a\"\n";
    gbnf += "r" + std::to_string(kRules) + " ::= \"b\"\n";
    auto parsed = std::make_shared<grammar::ParsedGrammar>(grammar::parse_gbnf(gbnf));
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
    pieces.push_back("</s>");
    auto trie = std::make_shared<grammar::TokenTrie>(pieces, std::vector<uint8_t>{}, std::vector<int32_t>{256});
    grammar::GrammarMatcher m(parsed, trie);
    EXPECT_TRUE(m.accept_bytes("b" + repeat("a", 3)));
    EXPECT_FALSE(m.can_end());
}

TEST(HostileJsonSchema, DeepSchemasAreRefused) {
    // A 100k-deep array and {"const": <1M deep>} crashed; 6,000 nested properties crashed after 17.5 s.
    const std::string deep_array = repeat("[", 100000) + repeat("]", 100000);
    EXPECT_NE(error_of([&] { grammar::json_schema_to_gbnf(deep_array); }).find("deeper than 256"), std::string::npos);
    const std::string deep_const = R"({"const": )" + repeat("[", 1000000) + repeat("]", 1000000) + "}";
    EXPECT_NE(error_of([&] { grammar::json_schema_to_gbnf(deep_const); }).find("deeper than 256"), std::string::npos);
    std::string nested = R"({"type": "string"})";
    for (int i = 0; i < 6000; ++i) nested = R"({"type": "object", "properties": {"a": )" + nested + "}}";
    EXPECT_NE(error_of([&] { grammar::json_schema_to_gbnf(nested); }).find("deeper than 256"), std::string::npos);
    // Within the JSON depth, still deeper than the converter's own limit (it recurses per schema level).
    std::string items = R"({"type": "integer"})";
    for (int i = 0; i < 200; ++i) items = R"({"items": )" + items + "}";
    const std::string m = error_of([&] { grammar::json_schema_to_gbnf(items); });
    EXPECT_NE(m.find("schemas nest deeper than 128"), std::string::npos) << m;
}

TEST(HostileJsonSchema, RefChainsCountTowardsTheDepth) {
    // Flat JSON, deep recursion: d0 -> d1 -> ... -> d999 through $ref.
    nlohmann::json defs = nlohmann::json::object();
    for (int i = 0; i < 1000; ++i)
        defs["d" + std::to_string(i)] = {{"type", "array"}, {"items", {{"$ref", "#/$defs/d" + std::to_string(i + 1)}}}};
    defs["d1000"] = {{"type", "integer"}};
    const nlohmann::json schema = {{"$defs", defs}, {"$ref", "#/$defs/d0"}};
    const std::string m = error_of([&] { grammar::json_schema_to_gbnf(schema.dump()); });
    EXPECT_NE(m.find("schemas nest deeper than 128"), std::string::npos) << m;
}

TEST(HostileJsonSchema, PropertyCountIsBounded) {
    // 20k flat properties took 74 s (a quadratic rule-name search); now refused past 5,000 subschemas.
    auto flat = [](int n) {
        nlohmann::ordered_json props = nlohmann::ordered_json::object();
        for (int i = 0; i < n; ++i) props["p" + std::to_string(i)] = {{"type", "integer"}};
        return nlohmann::ordered_json{{"type", "object"}, {"properties", props}}.dump();
    };
    const std::string m = error_of([&] { grammar::json_schema_to_gbnf(flat(6000)); });
    EXPECT_NE(m.find("more than 5000 subschemas"), std::string::npos) << m;
    const std::string gbnf = grammar::json_schema_to_gbnf(flat(4000));
    EXPECT_NO_THROW(grammar::parse_gbnf(gbnf));
}

// Issue 34 item 3: the limits are GrammarLimits (serve's flags), and compilation stops at their deadline.
TEST(HostileJsonSchema, LimitsAndDeadlineAreTheCallers) {
    nlohmann::ordered_json props = nlohmann::ordered_json::object();
    for (int i = 0; i < 30; ++i) props["p" + std::to_string(i)] = {{"type", "integer"}};
    const std::string schema = nlohmann::ordered_json{{"type", "object"}, {"properties", props}}.dump();
    GrammarLimits limits;
    limits.max_schema_nodes = 20;
    std::string m = error_of([&] { grammar::json_schema_to_gbnf(schema, limits); });
    EXPECT_NE(m.find("more than 20 subschemas"), std::string::npos) << m;
    limits.max_elements = 2048;
    m = error_of([&] { grammar::parse_gbnf("root ::= \"x\"{3000}", limits); });
    EXPECT_NE(m.find("more than 2048 elements"), std::string::npos) << m;
    limits.max_group_depth = 4;
    m = error_of([&] { grammar::parse_gbnf("root ::= ((((( \"x\" )))))", limits); });
    EXPECT_NE(m.find("nested deeper than 4"), std::string::npos) << m;

    GrammarLimits expired;
    expired.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
    EXPECT_THROW(grammar::json_schema_to_gbnf(schema, expired), PreparationExpired);
    EXPECT_THROW(Grammar::from_gbnf("root ::= \"x\"", expired), PreparationExpired);
    const ToolSchema tool{"f", schema};
    EXPECT_THROW(Grammar::for_tool_calls(ToolCallFormat::qwen, std::span(&tool, 1), false, expired),
                 PreparationExpired);
    EXPECT_NO_THROW(Grammar::from_gbnf("root ::= \"x\""));  // no deadline by default
}

// A valid Llama config.json, then one field changed.
nlohmann::json llama_config() {
    return nlohmann::json::parse(R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
        "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 300, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0})");
}

TEST(HostileHfConfig, FieldsOfTheWrongTypeOrRangeAreRefused) {
    EXPECT_NO_THROW(read_hf_config(llama_config(), "config.json"));
    const std::vector<std::pair<std::string, nlohmann::json>> bad = {
        {"num_hidden_layers", 0},
        {"hidden_size", 0},
        {"num_attention_heads", 0},
        {"num_key_value_heads", 0},
        {"vocab_size", -1},
        {"intermediate_size", "128"},
        {"max_position_embeddings", 0},
        {"max_position_embeddings", 4294967295LL},
        {"rms_norm_eps", "small"},
        {"rms_norm_eps", -1.0},
        {"head_dim", 0},
        {"rope_scaling", {{"rope_type", "linear"}, {"factor", "two"}}},
        {"rope_scaling", {{"rope_type", 7}}},
        {"hidden_size", 1.5},
    };
    for (const auto& [key, value] : bad) {
        nlohmann::json c = llama_config();
        c[key] = value;
        SCOPED_TRACE(key + " = " + value.dump());
        const std::string m = error_of([&] { read_hf_config(c, "config.json"); }, ErrorCode::bad_format);
        EXPECT_NE(m.find("config.json"), std::string::npos) << m;
    }
}

// The committed seeds (and the depth-heavy inputs above) through each parser: an Error or a result, never
// a crash.
void run_corpus(const std::string& dir, const std::function<void(const std::string&)>& parse) {
    const std::filesystem::path root = std::filesystem::path(KVSTASH_SOURCE_DIR) / "tests/fuzz/corpus" / dir;
    size_t seen = 0;
    for (const auto& entry : std::filesystem::directory_iterator(root)) {
        std::ifstream in(entry.path(), std::ios::binary);
        std::stringstream text;
        text << in.rdbuf();
        try {
            parse(text.str());
        } catch (const Error&) {}
        ++seen;
    }
    EXPECT_GT(seen, 3u) << root;
}

TEST(HostileSeeds, GrammarJsonSchemaAndConfigCorpora) {
    run_corpus("grammar", [](const std::string& s) { grammar::parse_gbnf(s); });
    run_corpus("json_schema", [](const std::string& s) { grammar::parse_gbnf(grammar::json_schema_to_gbnf(s)); });
    run_corpus("hf_config", [](const std::string& s) {
        json_depth::require_depth_at_most(s, "config.json", ErrorCode::bad_format);
        const nlohmann::json j = nlohmann::json::parse(s, nullptr, false);
        if (!j.is_discarded()) read_hf_config(j, "config.json");
    });
    // The same seeds as a whole model directory's config.json (fuzz_structured's selector 3).
    run_corpus("hf_config", [](const std::string& s) { fuzz::load_hf_directory_with_config(s, KVSTASH_SOURCE_DIR); });
    std::error_code ignored;
    std::filesystem::remove_all(fuzz::hf_fuzz_directory(KVSTASH_SOURCE_DIR), ignored);
}

}  // namespace
}  // namespace kvstash
