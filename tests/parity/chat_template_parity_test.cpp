// Chat templates against transformers: every conversation in tests/fixtures/chat/*.json, written by
// tests/reference/make_chat_template_fixtures.py (apply_chat_template(..., tokenize=False)), renders byte for
// byte; each fixture's template text is recognised as the right template; and, with SmolLM2's own GGUF and
// tokenizer, for_model renders the same and the token ids of a conversation are prefix-stable.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvstash/chat.h"
#include "kvstash/model.h"
#include "kvstash/tokenizer.h"
#include "support/paths.h"
#include "text/chat_template_detect.h"

namespace kvstash {
namespace {

AddGenerationPrompt generation_prompt(const nlohmann::json& fixture_case) {
    return fixture_case.at("add_generation_prompt").get<bool>() ? AddGenerationPrompt::yes : AddGenerationPrompt::no;
}

using nlohmann::json;
using Messages = std::vector<ChatMessage>;

// tests/fixtures/chat/<name>.json
const std::vector<std::string> kFixtures = {"chatml",   "smollm2",  "qwen2",   "qwen2_5",
                                            "llama3_0", "llama3_1", "llama3_2"};

json load_fixture(const std::string& name) {
    const std::string path = test::fixture_path("chat/" + name + ".json");
    std::ifstream in(path);
    if (!in) {
        ADD_FAILURE() << "cannot open " << path << " (tests/reference/make_chat_template_fixtures.py writes it)";
        return json::object();
    }
    return json::parse(in);
}

Messages messages_of(const json& j) {
    Messages out;
    for (const json& m : j) out.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    return out;
}

// Renders every case of `fixture` with `tmpl` (its date set from the case); returns how many matched.
int render_cases(const json& fixture, ChatTemplate tmpl, const std::string& label, bool only_leading_system = false) {
    int matched = 0;
    const size_t n_cases = fixture.at("cases").size();
    for (size_t i = 0; i < n_cases; ++i) {
        const json& c = fixture.at("cases")[i];
        const Messages messages = messages_of(c.at("messages"));
        if (only_leading_system && messages.front().role != "system") continue;
        tmpl.set_date_string(c.contains("date_string") ? c.at("date_string").get<std::string>() : "26 Jul 2024");
        const std::string rendered = tmpl.render(messages, generation_prompt(c));
        const std::string expected = c.at("rendered").get<std::string>();
        EXPECT_EQ(rendered, expected) << label << " case " << i;
        matched += rendered == expected;
    }
    return matched;
}

TEST(ChatTemplateParity, EveryFixtureCaseByDetection) {
    for (const std::string& name : kFixtures) {
        const json fixture = load_fixture(name);
        if (fixture.empty()) continue;
        const ChatTemplate tmpl = detect_chat_template(fixture.at("template").get<std::string>());
        const json& expected = fixture.at("expected_detection");
        EXPECT_EQ(tmpl.name(), expected.at("name").get<std::string>()) << name;
        // The default system prompt read from the template text is the one the fixture says it holds.
        const std::string probe = tmpl.render(Messages{{"user", "x"}}, AddGenerationPrompt::no);
        if (expected.at("default_system").is_null()) {
            EXPECT_EQ(probe, ChatTemplate::named(tmpl.name()).render(Messages{{"user", "x"}}, AddGenerationPrompt::no))
                << name;
        } else {
            EXPECT_TRUE(probe.starts_with("<|im_start|>system\n" + expected.at("default_system").get<std::string>() +
                                          "<|im_end|>\n"))
                << name << ": " << probe;
        }
        const int matched = render_cases(fixture, tmpl, name + " (detected)");
        std::cout << name << ": " << matched << "/" << fixture.at("cases").size() << " cases byte-identical\n";
        EXPECT_GE(fixture.at("cases").size(), 20u) << name;
    }
}

TEST(ChatTemplateParity, NamedTemplates) {
    // Templates without a default system prompt: the named template is the whole template.
    const std::vector<std::pair<std::string, std::string>> plain = {
        {"chatml", "chatml"}, {"llama3_0", "llama3.0"}, {"llama3_1", "llama3"}, {"llama3_2", "llama3"}};
    for (const auto& [fixture_name, template_name] : plain) {
        const json fixture = load_fixture(fixture_name);
        if (fixture.empty()) continue;
        const int matched = render_cases(fixture, ChatTemplate::named(template_name), fixture_name + " (named)");
        EXPECT_EQ(matched, static_cast<int>(fixture.at("cases").size())) << fixture_name;
    }
    // With a default system prompt, named("chatml") still matches every conversation that brings its own.
    for (const std::string fixture_name : {"smollm2", "qwen2", "qwen2_5"}) {
        const json fixture = load_fixture(fixture_name);
        if (fixture.empty()) continue;
        EXPECT_GT(render_cases(fixture, ChatTemplate::named("chatml"), fixture_name + " (named chatml)", true), 5);
    }
}

TEST(ChatTemplateParity, Llama32TodayDate) {
    // transformers renders Llama 3.2's template with today's date (strftime_now); with that date set, kvstash
    // renders the same text.
    const json fixture = load_fixture("llama3_2");
    if (fixture.empty()) return;
    const json& today = fixture.at("today_example");
    const std::string expected = today.at("rendered").get<std::string>();
    const std::string label = "\nToday Date: ";
    const size_t begin = expected.find(label), end = expected.find("\n\n", begin + 1);
    ASSERT_NE(begin, std::string::npos);
    ASSERT_NE(end, std::string::npos);
    const std::string date = expected.substr(begin + label.size(), end - begin - label.size());
    EXPECT_EQ(date.size(), std::string("05 Mar 2025").size()) << date;  // strftime("%d %b %Y")
    ChatTemplate tmpl = detect_chat_template(fixture.at("template").get<std::string>());
    tmpl.set_date_string(date);
    EXPECT_EQ(tmpl.render(messages_of(today.at("messages")), generation_prompt(today)), expected);
}

TEST(ChatTemplateParity, ForModelOnSmolLM2) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto model = Model::load(test::default_model_path());
    const ChatTemplate tmpl = ChatTemplate::for_model(*model);
    EXPECT_EQ(tmpl.name(), "chatml");
    const json fixture = load_fixture("smollm2");
    if (fixture.empty()) return;
    const int matched = render_cases(fixture, tmpl, "smollm2 (for_model)");
    EXPECT_EQ(matched, static_cast<int>(fixture.at("cases").size()));
}

bool is_prefix(const std::vector<int32_t>& prefix, const std::vector<int32_t>& ids) {
    return prefix.size() <= ids.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

TEST(ChatTemplateParity, TokenPrefixStabilityWithSmolLM2) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto model = Model::load(test::default_model_path());
    const Tokenizer& tok = model->tokenizer();
    const ChatTemplate tmpl = ChatTemplate::for_model(*model);
    auto encode = [&](const std::string& text) { return tok.encode(text, AddSpecial::no, ParseSpecial::yes); };
    const std::vector<int32_t> im_end = encode("<|im_end|>");
    ASSERT_EQ(im_end.size(), 1u);
    EXPECT_TRUE(tok.is_eog(im_end[0]));

    // Replies start with a non-space: after the prompt's final "\n", a reply starting with spaces re-tokenizes
    // differently from how it was generated ("\n" + "  Hi" -> [198, 216, 21041] generated, [3805, 21041] when
    // the closed turn is encoded), so an engine reusing state must keep the generated ids, not re-encode.
    const std::vector<Messages> conversations = {
        {{"user", "Hi!"},
         {"assistant", "Hello! How can I help you today?"},
         {"user", "Tell me a joke."},
         {"assistant", "Why don't scientists trust atoms? Because they make up everything!"},
         {"user", "Another."},
         {"assistant", "Spaces  inside, 42 and 3.14\n\n"}},
        {{"system", "Be brief."},
         {"user", "2+2?"},
         {"assistant", "4"},
         {"user", "Café? 你好 😀"},
         {"assistant", "Oui.\nLine two."}},
    };
    for (const Messages& conversation : conversations) {
        std::vector<int32_t> previous;
        for (size_t n = 1; n <= conversation.size(); ++n) {
            const std::span<const ChatMessage> turns(conversation.data(), n);
            const std::vector<int32_t> closed = encode(tmpl.render(turns, AddGenerationPrompt::no));
            EXPECT_TRUE(is_prefix(previous, closed)) << n << " messages";
            if (conversation[n - 1].role != "assistant") {
                EXPECT_TRUE(is_prefix(previous, encode(tmpl.render(turns, AddGenerationPrompt::yes))))
                    << n << " messages";
                continue;
            }
            // The tokens a generation would hold: the prompt's, the reply's, <|im_end|>; then the template's "\n".
            std::vector<int32_t> generated = encode(tmpl.render(turns.first(n - 1), AddGenerationPrompt::yes));
            for (int32_t id : encode(conversation[n - 1].content)) generated.push_back(id);
            generated.push_back(im_end[0]);
            for (int32_t id : encode(tmpl.end_of_turn_suffix())) generated.push_back(id);
            EXPECT_EQ(generated, closed) << n << " messages";
            previous = closed;
        }
    }
}

}  // namespace
}  // namespace kvstash
