// server/preset.h: a preset file's fields checked with the field named in the error, and a request body with a
// preset applied (defaults only where the body has none; the system prompt only when no message is one).
#include "server/preset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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
    EXPECT_NE(error_of({{"model", "m"}, {"adapters", "a.gguf"}}).find("'adapters' must be a list"), std::string::npos);
    EXPECT_NE(error_of({{"model", "m"}, {"adapters", {{{"lora", "a.gguf"}, {"scale", "x"}}}}})
                  .find("'adapters[0].scale' must be a number"),
              std::string::npos);
    EXPECT_NE(error_of({{"model", "m"}, {"adapters", {"a.gguf", {{"scale", 1}}}}}).find("'adapters[1]' must name one"),
              std::string::npos);
    EXPECT_NE(error_of({{"model", "m"}, {"adapters", {{{"lora", "a"}, {"control_vector", "b"}}}}})
                  .find("'adapters[0]' must name one"),
              std::string::npos);
    EXPECT_NE(error_of({{"model", "m"}, {"adapters", {{{"lora", "a"}, {"alpha", 2}}}}})
                  .find("'adapters[0].alpha' is not an adapter field"),
              std::string::npos);
    EXPECT_EQ(error_of({{"model", "m"}, {"options", {{"seed", -4}, {"stop", "\n"}, {"min_p", 0.05}}}}), "");
}

TEST(ServerPreset, AdaptersInOrderWithTheirKindAndScale) {
    const Preset p = parse_preset(
        {{"model", "m"},
         {"adapters",
          {"plain.gguf", {{"lora", "style.gguf"}, {"scale", 0.5}}, {{"control_vector", "calm.gguf"}, {"scale", -1}}}}},
        "p", "p");
    ASSERT_EQ(p.adapters.size(), 3u);
    EXPECT_EQ(p.adapters[0].kind, AdapterKind::lora);
    EXPECT_EQ(p.adapters[0].path, "plain.gguf");
    EXPECT_EQ(p.adapters[0].scale, 1.0f);
    EXPECT_EQ(p.adapters[1].path, "style.gguf");
    EXPECT_EQ(p.adapters[1].scale, 0.5f);
    EXPECT_EQ(p.adapters[2].kind, AdapterKind::control_vector);
    EXPECT_EQ(p.adapters[2].scale, -1.0f);
}

// A preset file's adapter paths are its directory's; one that names no file stops it (Error(io), the field named).
TEST(ServerPreset, AdapterPathsAreTheFilesDirectorys) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("kvstash_preset_unit_" + std::to_string(getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "style.gguf") << "x";
    std::ofstream(dir / "p.preset.json") << R"({"model": "m", "adapters": [{"lora": "style.gguf"}]})";
    const Preset p = load_preset_file((dir / "p.preset.json").string());
    ASSERT_EQ(p.adapters.size(), 1u);
    EXPECT_EQ(p.adapters[0].path, (dir / "style.gguf").string());
    std::ofstream(dir / "q.preset.json") << R"({"model": "m", "adapters": ["missing.gguf"]})";
    try {
        load_preset_file((dir / "q.preset.json").string());
        ADD_FAILURE() << "a missing adapter file was taken";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::io);
        EXPECT_NE(std::string(e.what()).find("field 'adapters[0]' names"), std::string::npos) << e.what();
    }
    fs::remove_all(dir);
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
