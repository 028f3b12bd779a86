// Constrained output end to end: `kvstash serve` (SmolLM2) with response_format json_object /
// json_schema and a GBNF `grammar`, streamed and not, several choices; and the CLI's --json-schema /
// --grammar on the tiny random model for many seeds. Every finished JSON document is validated with the
// Python `jsonschema` package (an implementation independent of kvstash's; scripts/setup.sh installs it
// into .venv). Unconstrained requests are unchanged by the feature (same text and logprobs).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e/server/http_client.h"
#include "e2e/server/server_process.h"
#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 24},
  "age": {"type": "integer"},
  "city": {"enum": ["Paris", "London", "Tokyo"]},
  "pets": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
  "born": {"type": "string", "format": "date"}},
  "required": ["name", "age", "city"]})";

std::string venv_python() {
    if (const char* p = std::getenv("KVSTASH_PYTHON"); p && *p) return p;
    return source_dir() + "/.venv/bin/python";
}

fs::path temp_dir() {
    static const fs::path dir = [] {
        fs::path d = fs::temp_directory_path() / ("kvstash_constrained_" + std::to_string(getpid()));
        fs::create_directories(d);
        return d;
    }();
    return dir;
}

// Validates every document (JSON text) against the schema with Python's jsonschema; "" when all pass.
std::string validate_with_jsonschema(const std::vector<std::string>& documents, const std::string& schema) {
    const fs::path input = temp_dir() / "documents.json";
    std::ofstream(input) << json{{"schema", json::parse(schema)}, {"documents", documents}}.dump();
    const ProcessResult r = run_process(
        {venv_python(), "-c",
         "import json, sys, jsonschema\n"
         "d = json.load(open(sys.argv[1]))\n"
         "for text in d['documents']:\n"
         "    jsonschema.validate(json.loads(text), d['schema'], format_checker=jsonschema.FormatChecker())\n"
         "print('valid', len(d['documents']))\n",
         input.string()});
    if (r.exit_code != 0) return "jsonschema failed (run scripts/setup.sh if it is missing):\n" + r.out + r.err;
    return "";
}

ServerProcess& server() {
    static ServerProcess s({"-t", "2", "--parallel", "4"});
    return s;
}

json chat_body(const json& extra) {
    json body = {{"messages", json::array({{{"role", "user"}, {"content", "Describe a person as JSON."}}})},
                 {"max_tokens", 96}};
    body.update(extra);
    return body;
}

TEST(ServerConstrained, JsonSchemaChoicesValidate) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    httplib::Client client(server().url());
    client.set_read_timeout(300);
    std::vector<std::string> documents;
    int finished = 0;
    for (int seed = 1; seed <= 2; ++seed) {
        const Reply r = post(client, "/v1/chat/completions",
                             chat_body({{"n", 3},
                                        {"seed", seed},
                                        {"temperature", 1.0},
                                        {"response_format",
                                         {{"type", "json_schema"},
                                          {"json_schema", {{"name", "person"}, {"schema", json::parse(kSchema)}}}}}}));
        ASSERT_EQ(r.status, 200) << r.text;
        for (const json& choice : r.body["choices"]) {
            const std::string content = choice["message"]["content"];
            if (choice["finish_reason"] != "stop") continue;  // cut at max_tokens: an unfinished document
            ++finished;
            documents.push_back(content);
        }
    }
    EXPECT_GE(finished, 3);
    EXPECT_EQ(validate_with_jsonschema(documents, kSchema), "");
}

TEST(ServerConstrained, JsonObjectAndGrammarStreamed) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    httplib::Client client(server().url());
    client.set_read_timeout(300);
    const Reply object =
        post(client, "/v1/chat/completions", chat_body({{"seed", 3}, {"response_format", {{"type", "json_object"}}}}));
    ASSERT_EQ(object.status, 200) << object.text;
    if (object.body["choices"][0]["finish_reason"] == "stop") {
        const json doc =
            json::parse(object.body["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
        EXPECT_TRUE(doc.is_object()) << object.text;
    }
    // A grammar, streamed: the deltas concatenate to a sentence of it; the choice ends when it is complete.
    const Reply stream = post(client, "/v1/completions",
                              json{{"prompt", "Is the sky blue? Answer:"},
                                   {"grammar", "root ::= \" \" (\"yes\" | \"no\") \", because \" [a-z ]{1,20} \".\""},
                                   {"max_tokens", 64},
                                   {"seed", 5},
                                   {"stream", true}});
    ASSERT_EQ(stream.status, 200) << stream.text;
    bool done = false;
    std::string text, finish;
    for (const json& event : parse_sse(stream.text, &done)) {
        for (const json& c : event["choices"]) {
            text += c.value("text", "");
            if (c.contains("finish_reason") && c["finish_reason"].is_string()) finish = c["finish_reason"];
        }
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(finish, "stop") << text;
    EXPECT_TRUE(text.starts_with(" yes, because ") || text.starts_with(" no, because ")) << text;
    EXPECT_TRUE(text.ends_with(".")) << text;
}

// Issue 33 item 1: the schema's order is `reasoning` then `answer` (not alphabetical). The body is sent as
// text: a json object would sort the keys before they leave the client.
TEST(ServerConstrained, JsonSchemaKeepsThePropertiesOrder) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    httplib::Client client(server().url());
    client.set_read_timeout(300);
    const std::string body = R"({"messages": [{"role": "user", "content": "What is 3 + 4? Think, then answer."}],
        "max_tokens": 80, "seed": 2, "temperature": 0.7,
        "response_format": {"type": "json_schema", "json_schema": {"name": "worked", "schema": {
          "type": "object",
          "properties": {"reasoning": {"type": "string", "maxLength": 60}, "answer": {"type": "integer"}},
          "required": ["reasoning", "answer"]}}}})";
    const Reply r = post(client, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.text;
    const std::string content = r.body["choices"][0]["message"]["content"];
    const size_t reasoning = content.find("\"reasoning\"");
    ASSERT_NE(reasoning, std::string::npos) << content;
    EXPECT_EQ(content.find_first_not_of(" \t\n{"), reasoning) << content;  // the first key
    const size_t answer = content.find("\"answer\"");
    if (r.body["choices"][0]["finish_reason"] == "stop") {
        EXPECT_NE(answer, std::string::npos) << content;
    }
    if (answer != std::string::npos) {
        EXPECT_GT(answer, reasoning) << content;
    }
}

// Issue 33 item 5: with whitespace made likelier than anything else (logit_bias on the newline and tab
// tokens), the document is still ended when its root object closes: finish "stop", no trailing
// whitespace, and never "length" for whitespace the grammar would have allowed after the "}".
TEST(ServerConstrained, JsonEndsWhenTheRootValueIsComplete) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    httplib::Client client(server().url());
    client.set_read_timeout(300);
    json bias = json::object();
    for (const char* ws : {"\n", "\t", "\t\t", "\n\t"}) {
        const Reply ids = post(client, "/tokenize", json{{"content", ws}});
        ASSERT_EQ(ids.status, 200) << ids.text;
        if (ids.body["tokens"].size() == 1) bias[std::to_string(ids.body["tokens"][0].get<int>())] = 30;
    }
    ASSERT_FALSE(bias.empty());
    const json schema = {
        {"type", "object"}, {"properties", {{"ok", {{"type", "boolean"}}}}}, {"required", json::array({"ok"})}};
    for (const bool object_mode : {false, true}) {
        json format = object_mode
                          ? json{{"type", "json_object"}}
                          : json{{"type", "json_schema"}, {"json_schema", {{"name", "ok"}, {"schema", schema}}}};
        const Reply r = post(client, "/v1/chat/completions",
                             chat_body({{"seed", 4},
                                        {"max_tokens", object_mode ? 120 : 200},
                                        {"logit_bias", bias},
                                        {"response_format", format}}));
        ASSERT_EQ(r.status, 200) << r.text;
        const json& choice = r.body["choices"][0];
        const std::string content = choice["message"]["content"];
        if (!object_mode || choice["finish_reason"] == "stop") {
            EXPECT_EQ(choice["finish_reason"], "stop") << content;
            ASSERT_FALSE(content.empty());
            EXPECT_EQ(content.back(), '}') << json(content).dump();
            EXPECT_TRUE(json::parse(content, nullptr, false).is_object()) << content;
        }
    }
}

TEST(ServerConstrained, UnconstrainedRequestsAreUnchanged) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    httplib::Client client(server().url());
    client.set_read_timeout(300);
    const json base = chat_body({{"seed", 11}, {"max_tokens", 24}, {"logprobs", true}, {"top_logprobs", 2}});
    json with_text = base;
    with_text["response_format"] = {{"type", "text"}};
    const Reply a = post(client, "/v1/chat/completions", base);
    const Reply b = post(client, "/v1/chat/completions", with_text);
    ASSERT_EQ(a.status, 200) << a.text;
    ASSERT_EQ(b.status, 200) << b.text;
    EXPECT_EQ(a.body["choices"], b.body["choices"]);  // text and every logprob, as printed
}

TEST(ServerConstrained, BadGrammarsAndSchemasAre400sNamingTheProblem) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    httplib::Client client(server().url());
    const Reply unsupported = post(
        client, "/v1/chat/completions",
        chat_body(
            {{"response_format",
              {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "string"}, {"pattern", "^a+$"}}}}}}}}));
    EXPECT_EQ(unsupported.status, 400);
    EXPECT_NE(error_message(unsupported).find("pattern"), std::string::npos) << unsupported.text;
    EXPECT_EQ(unsupported.body["error"]["code"], "unsupported");
    const Reply syntax = post(client, "/v1/completions", json{{"prompt", "x"}, {"grammar", "root ::= \"a"}});
    EXPECT_EQ(syntax.status, 400);
    EXPECT_NE(error_message(syntax).find("line 1, column 12"), std::string::npos) << syntax.text;
    EXPECT_EQ(syntax.body["error"]["param"], "grammar");
    const Reply both =
        post(client, "/v1/completions",
             json{{"prompt", "x"}, {"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}});
    EXPECT_EQ(both.status, 400);
    const Reply kind = post(client, "/v1/completions", json{{"prompt", "x"}, {"response_format", {{"type", "yaml"}}}});
    EXPECT_EQ(kind.status, 400);
    EXPECT_NE(error_message(kind).find("yaml"), std::string::npos) << kind.text;
}

TEST(CliConstrained, TinyModelJsonSchemaManySeeds) {
    const fs::path schema = temp_dir() / "schema.json";
    std::ofstream(schema) << kSchema;
    std::vector<std::string> documents;
    for (int seed = 1; seed <= 12; ++seed) {
        const ProcessResult r =
            run_process({cli_path(), "generate", "-m", fixture_path("tiny/gqa_f32.gguf"), "-p", "hi", "-n", "400",
                         "--temp", "1.2", "--seed", std::to_string(seed), "--json-schema", schema.string(), "--json"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const json line = json::parse(r.out);
        if (line["stop"] == "end_of_generation") documents.push_back(line["text"]);
    }
    EXPECT_GE(documents.size(), 6u);
    EXPECT_EQ(validate_with_jsonschema(documents, kSchema), "");
}

TEST(CliConstrained, GrammarFileErrors) {
    const fs::path bad = temp_dir() / "bad.gbnf";
    std::ofstream(bad) << "root ::= \"a\"\nitem ::= [a-\n";
    const ProcessResult r = run_process(
        {cli_path(), "generate", "-m", fixture_path("tiny/gqa_f32.gguf"), "-p", "hi", "--grammar", bad.string()});
    EXPECT_EQ(r.exit_code, 3) << r.err;  // a bad input file
    EXPECT_NE(r.err.find("bad.gbnf': grammar: line "), std::string::npos) << r.err;
    const ProcessResult both = run_process({cli_path(), "generate", "-m", fixture_path("tiny/gqa_f32.gguf"), "-p", "hi",
                                            "--grammar", bad.string(), "--json-schema", bad.string()});
    EXPECT_EQ(both.exit_code, 2) << both.err;  // flags that exclude each other
}

}  // namespace
}  // namespace kvstash::test
