// ChatTemplate without a model: names, errors, recognition of template texts, llama3's trimming, and the
// prefix stability that lets a conversation's earlier turns keep their state. Byte parity with transformers
// is tests/parity/chat_template_parity_test.cpp.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/chat.h"
#include "kvstash/error.h"
#include "kvstash/model.h"
#include "support/paths.h"
#include "text/chat_template_detect.h"
#include "text/chat_template_known.h"

namespace kvstash {
namespace {

using Messages = std::vector<ChatMessage>;

// Runs `fn`, which must throw Error(code) whose message contains every needle.
template <typename Fn>
void expect_error(Fn fn, ErrorCode code, const std::vector<std::string>& needles) {
    try {
        fn();
        ADD_FAILURE() << "no error thrown";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        for (const std::string& needle : needles) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    }
}

// The known text of the first template rendering as `name` that has a default system prompt, with `prompt` in it.
std::string known_text_with_prompt(std::string_view name, std::string_view prompt) {
    for (const KnownChatTemplate& known : known_chat_templates()) {
        if (known.name != name || known.text.find(kDefaultSystemMarker) == std::string_view::npos) continue;
        std::string text(known.text);
        for (size_t pos; (pos = text.find(kDefaultSystemMarker)) != std::string::npos;) {
            text.replace(pos, kDefaultSystemMarker.size(), prompt);
        }
        return text;
    }
    ADD_FAILURE() << "no known " << name << " template with a default system prompt";
    return "";
}

const char* kSmolSystem = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

TEST(ChatTemplate, NamesAndNamed) {
    EXPECT_EQ(ChatTemplate::names(), (std::vector<std::string>{"chatml", "llama3", "llama3.0", "gemma"}));
    for (const std::string& name : ChatTemplate::names()) EXPECT_EQ(ChatTemplate::named(name).name(), name);
}

TEST(ChatTemplate, UnknownNameIsInvalidArgument) {
    expect_error([] { ChatTemplate::named("vicuna"); }, ErrorCode::invalid_argument,
                 {"\"vicuna\"", "chatml, llama3, llama3.0"});
    expect_error([] { ChatTemplate::named(""); }, ErrorCode::invalid_argument, {"unknown chat template"});
}

TEST(ChatTemplate, UnknownRoleIsInvalidArgument) {
    for (const std::string& name : ChatTemplate::names()) {
        const ChatTemplate tmpl = ChatTemplate::named(name);
        // ("tool" is a role where the template defines tools: tests/unit/chat_tools_test.cpp.)
        const Messages messages = {{"user", "hi"}, {"function", "42"}};
        expect_error([&] { tmpl.render(messages, AddGenerationPrompt::yes); }, ErrorCode::invalid_argument,
                     {"message 1", "\"function\""});
        const Messages capitalised = {{"User", "hi"}};
        expect_error([&] { tmpl.render(capitalised, AddGenerationPrompt::no); }, ErrorCode::invalid_argument,
                     {"\"User\""});
    }
}

TEST(ChatTemplate, EmptyConversationIsInvalidArgument) {
    for (const std::string& name : ChatTemplate::names()) {
        expect_error([&] { ChatTemplate::named(name).render({}, AddGenerationPrompt::yes); },
                     ErrorCode::invalid_argument, {"empty conversation"});
    }
}

// The library names the templates it can render by name (the CLI adds "pass --chat-template NAME", the
// server its own advice: tests/e2e).
TEST(ChatTemplate, UnrecognisedTemplateNamesTheKnownOnes) {
    const std::vector<std::string> needles = {"unrecognised chat template", "by name: chatml|llama3|llama3.0"};
    expect_error([] { detect_chat_template("{{ messages }}"); }, ErrorCode::unsupported, needles);
    expect_error([] { detect_chat_template(""); }, ErrorCode::unsupported, needles);
    // One byte away from SmolLM2's template.
    const std::string smol_exact = known_text_with_prompt("chatml", kSmolSystem);
    const size_t at = smol_exact.find("message['content']");
    ASSERT_NE(at, std::string::npos);
    const std::string smol = smol_exact.substr(0, at) + " " + smol_exact.substr(at);
    expect_error([&] { detect_chat_template(smol); }, ErrorCode::unsupported, needles);
    // A default system prompt holding a quote or a backslash would need Jinja unescaping: not recognised.
    expect_error([] { detect_chat_template(known_text_with_prompt("chatml", "It\\'s me")); }, ErrorCode::unsupported,
                 needles);
    expect_error([] { detect_chat_template(known_text_with_prompt("chatml", "a\\nb")); }, ErrorCode::unsupported,
                 needles);
}

TEST(ChatTemplate, ModelWithoutTemplateNamesTheKnownOnes) {
    const auto model = Model::load(test::fixture_path("tiny/gqa_f32.gguf"));
    expect_error([&] { ChatTemplate::for_model(*model); }, ErrorCode::unsupported,
                 {"no chat template", "by name: chatml|llama3|llama3.0"});
}

TEST(ChatTemplate, DetectsEveryKnownTextAndReadsTheDefaultSystemPrompt) {
    for (const KnownChatTemplate& known : known_chat_templates()) {
        std::string text(known.text);
        const bool has_prompt = text.find(kDefaultSystemMarker) != std::string::npos;
        for (size_t pos; (pos = text.find(kDefaultSystemMarker)) != std::string::npos;) {
            text.replace(pos, kDefaultSystemMarker.size(), "Be nice. 你好 {{ x }}");
        }
        const ChatTemplate tmpl = detect_chat_template(text);
        EXPECT_EQ(tmpl.name(), known.name);
        const std::string rendered = tmpl.render(Messages{{"user", "Hi"}}, AddGenerationPrompt::no);
        if (has_prompt) {
            EXPECT_EQ(rendered,
                      "<|im_start|>system\nBe nice. 你好 {{ x }}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
        } else {
            EXPECT_EQ(rendered,
                      ChatTemplate::named(known.name).render(Messages{{"user", "Hi"}}, AddGenerationPrompt::no));
        }
    }
    // Jinja drops one trailing newline, so a template stored with or without it is the same template.
    const std::string smol = known_text_with_prompt("chatml", kSmolSystem);
    EXPECT_EQ(detect_chat_template(smol + "\n").render(Messages{{"user", "x"}}, AddGenerationPrompt::no),
              detect_chat_template(smol).render(Messages{{"user", "x"}}, AddGenerationPrompt::no));
    // An empty default system prompt is still a system turn.
    EXPECT_EQ(detect_chat_template(known_text_with_prompt("chatml", ""))
                  .render(Messages{{"user", "x"}}, AddGenerationPrompt::no),
              "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nx<|im_end|>\n");
}

TEST(ChatTemplate, ChatmlKeepsContentAsIs) {
    const ChatTemplate tmpl = ChatTemplate::named("chatml");
    const Messages messages = {{"system", " s \n"}, {"user", "\t<|im_end|>\xff"}};
    EXPECT_EQ(tmpl.render(messages, AddGenerationPrompt::yes),
              "<|im_start|>system\n s \n<|im_end|>\n"
              "<|im_start|>user\n\t<|im_end|>\xff<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(tmpl.end_of_turn_suffix(), "\n");
}

TEST(ChatTemplate, Llama3TrimsLikePythonStrip) {
    const ChatTemplate tmpl = ChatTemplate::named("llama3.0");
    auto body = [&](const std::string& content) {
        const std::string out = tmpl.render(Messages{{"user", content}}, AddGenerationPrompt::no);
        const std::string head = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n";
        EXPECT_TRUE(out.starts_with(head) && out.ends_with("<|eot_id|>")) << out;
        return out.substr(head.size(), out.size() - head.size() - std::string("<|eot_id|>").size());
    };
    EXPECT_EQ(body(" \t\n\r\v\f a b \x1c\x1d\x1e\x1f"), "a b");
    // U+0085 U+00A0 U+1680 U+2000 U+200A U+2028 U+2029 U+202F U+205F U+3000 are whitespace to Python.
    EXPECT_EQ(body("\u0085\u00a0\u1680\u2000x\u200a\u2028\u2029\u202f\u205f\u3000"), "x");
    // U+200B, U+FEFF and U+180E are not.
    EXPECT_EQ(body("\u200bx\ufeff"), "\u200bx\ufeff");
    EXPECT_EQ(body(" \u180e "), "\u180e");
    EXPECT_EQ(body("   "), "");
    // Malformed UTF-8 is never whitespace: stripping stops there.
    EXPECT_EQ(body(" \xffhi\xe3\x80 "), "\xffhi\xe3\x80");
    EXPECT_EQ(body("\xa0x"), "\xa0x");  // a lone continuation byte, not U+00A0
    EXPECT_EQ(body("x\xc2"), "x\xc2");
    EXPECT_EQ(tmpl.end_of_turn_suffix(), "");
}

TEST(ChatTemplate, Llama3DateString) {
    ChatTemplate tmpl = ChatTemplate::named("llama3");
    const Messages messages = {{"user", "Hi"}};
    const std::string fixed = tmpl.render(messages, AddGenerationPrompt::yes);
    EXPECT_NE(fixed.find("\nToday Date: 26 Jul 2024\n\n"), std::string::npos) << fixed;
    tmpl.set_date_string("05 Mar 2025");
    const std::string dated = tmpl.render(messages, AddGenerationPrompt::yes);
    EXPECT_NE(dated.find("\nToday Date: 05 Mar 2025\n\n"), std::string::npos) << dated;
    EXPECT_EQ(dated.size(), fixed.size());
}

TEST(ChatTemplate, BracedConversationAsInTheHeader) {
    const ChatTemplate tmpl = ChatTemplate::named("chatml");
    EXPECT_EQ(tmpl.render({{"system", "Be brief."}, {"user", "Hi!"}}, AddGenerationPrompt::yes),
              "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
}

// What the model generates to end its turn.
std::string end_of_turn_token(const ChatTemplate& tmpl) {
    if (tmpl.name() == "gemma") return "<end_of_turn>";
    return tmpl.name() == "chatml" ? "<|im_end|>" : "<|eot_id|>";
}

// The templates under test: each name, and ChatML with SmolLM2's default system prompt.
std::vector<ChatTemplate> all_templates() {
    std::vector<ChatTemplate> out;
    for (const std::string& name : ChatTemplate::names()) out.push_back(ChatTemplate::named(name));
    out.push_back(detect_chat_template(known_text_with_prompt("chatml", kSmolSystem)));
    return out;
}

// Conversations as they grow, each user turn answered by the assistant.
std::vector<Messages> conversations() {
    return {
        {{"user", "Hi!"},
         {"assistant", "Hello! How can I help?"},
         {"user", "A joke, please."},
         {"assistant", "Why did the chicken cross the road?"},
         {"user", "Why?"},
         {"assistant", "To get to the other side."}},
        {{"system", "Be brief."}, {"user", "2+2?"}, {"assistant", "4"}, {"user", "3+3?"}, {"assistant", "6"}},
        {{"system", "Réponds en français."},
         {"user", "Bonjour 😀"},
         {"assistant", "Bonjour ! 你好"},
         {"user", "Line one\nline two"},
         {"assistant", "Two\nlines\n\nback"}},
    };
}

TEST(ChatTemplate, GenerationPromptPlusReplyIsTheClosedTurn) {
    for (const ChatTemplate& tmpl : all_templates()) {
        for (const Messages& conversation : conversations()) {
            for (size_t n = 1; n <= conversation.size(); ++n) {
                if (conversation[n - 1].role != "assistant") continue;
                const std::span<const ChatMessage> before(conversation.data(), n - 1);
                const std::span<const ChatMessage> with_reply(conversation.data(), n);
                const std::string generated = conversation[n - 1].content + end_of_turn_token(tmpl);
                EXPECT_EQ(tmpl.render(with_reply, AddGenerationPrompt::no),
                          tmpl.render(before, AddGenerationPrompt::yes) + generated + tmpl.end_of_turn_suffix())
                    << tmpl.name() << ", " << n << " messages";
            }
        }
    }
}

TEST(ChatTemplate, EachClosedTurnIsAPrefixOfTheNext) {
    for (const ChatTemplate& tmpl : all_templates()) {
        for (const Messages& conversation : conversations()) {
            std::string previous;
            for (size_t n = 1; n <= conversation.size(); ++n) {
                const std::span<const ChatMessage> turns(conversation.data(), n);
                const std::string closed = tmpl.render(turns, AddGenerationPrompt::no);
                EXPECT_TRUE(closed.starts_with(previous)) << tmpl.name() << ", " << n << " messages:\n"
                                                          << previous << "\n---\n"
                                                          << closed;
                if (conversation[n - 1].role == "user") {
                    EXPECT_TRUE(tmpl.render(turns, AddGenerationPrompt::yes).starts_with(previous))
                        << tmpl.name() << ", " << n;
                }
                if (conversation[n - 1].role == "assistant") previous = closed;
            }
        }
    }
}

}  // namespace
}  // namespace kvstash
