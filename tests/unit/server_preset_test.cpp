// server/preset.h: a preset file's fields checked with the field named in the error, and a request body with a
// preset applied (defaults only where the body has none; the system prompt only when no message is one).
#include "server/preset.h"

#include <gtest/gtest.h>

#include "kvstash/error.h"

namespace kvstash::server {
namespace {

using nlohmann::json;

std::string error_of(const json& doc) {
    try {
        parse_preset(doc, "p", "'p.preset.json'");
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::bad_format);
        return e.what();
    }
    return "";
}

TEST(ServerPreset, BadFieldsAreNamed) {
    EXPECT_NE(error_of(json::array()).find("must be a JSON object"), std::string::npos);
    EXPECT_NE(error_of({{"system", "x"}}).find("field 'model' is required"), std::string::npos);
    EXPECT_NE(error_of({{"model", 3}}).find("field 'model' must be a string"), std::string::npos);
    EXPECT_NE(error_of({{"model", "m"}, {"options", {{"top_p", 2}}}}).find("'options.top_p' must be a number from 0"),
              std::string::npos);
    EXPECT_NE(error_of({{"model", "m"}, {"options", {{"max_tokens", 0}}}}).find("'options.max_tokens'"),
              std::string::npos);
    EXPECT_NE(error_of({{"model", "m"}, {"options", {{"stop", {1}}}}}).find("'options.stop'"), std::string::npos);
    EXPECT_NE(error_of({{"model", "m"}, {"options", {{"mirostat", 1}}}}).find("'options.mirostat' is not"),
              std::string::npos);
    EXPECT_NE(error_of({{"model", "m"}, {"adapters", json::array()}}).find("'adapters' is not supported"),
              std::string::npos);
    EXPECT_EQ(error_of({{"model", "m"}, {"options", {{"seed", -4}, {"stop", "\n"}, {"min_p", 0.05}}}}), "");
}

TEST(ServerPreset, NameComesFromTheFile) {
    EXPECT_EQ(preset_name_of("/x/terse.preset.json"), "terse");
    EXPECT_EQ(preset_name_of("coder.json"), "coder");
}

TEST(ServerPreset, AppliesDefaultsTheRequestDoesNotSet) {
    const Preset p = parse_preset(
        {{"model", "m"}, {"system", "S"}, {"options", {{"max_tokens", 3}, {"temperature", 0.5}, {"seed", 7}}}}, "p",
        "p");
    json chat = apply_preset(p, {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"temperature", 0}},
                             "/v1/chat/completions");
    EXPECT_EQ(chat["max_tokens"], 3);
    EXPECT_EQ(chat["temperature"], 0);  // the request's own
    EXPECT_EQ(chat["seed"], 7);
    ASSERT_EQ(chat["messages"].size(), 2u);
    EXPECT_EQ(chat["messages"][0], (json{{"role", "system"}, {"content", "S"}}));

    json own =
        apply_preset(p, {{"messages", {{{"role", "system"}, {"content", "mine"}}}}, {"max_completion_tokens", 9}},
                     "/v1/chat/completions");
    EXPECT_EQ(own["messages"].size(), 1u);
    EXPECT_FALSE(own.contains("max_tokens"));

    json ollama = apply_preset(p, {{"prompt", "hi"}, {"options", {{"seed", 1}}}}, "/api/generate");
    EXPECT_EQ(ollama["options"]["num_predict"], 3);
    EXPECT_EQ(ollama["options"]["seed"], 1);
    EXPECT_EQ(ollama["system"], "S");
}

}  // namespace
}  // namespace kvstash::server
