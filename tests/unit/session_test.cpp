// Session: each turn evaluates exactly the new turn's tokens, gives bitwise the logits of a cold
// evaluation, shares its system prompt through a PrefixCache, undoes without recomputation, and
// resumes from a session file exactly as if it had never been saved.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "kvstash/prefix_cache.h"
#include "kvstash/session.h"
#include "kvstash/tokenizer.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

const char* const kSystem =
    "You are a patient tutor for a student of English literature. You answer in one short sentence, you never use "
    "lists, "
    "and when you do not know something you say so plainly instead of guessing. The student is reading the novels of "
    "Jane Austen this term, starting with Persuasion, and will ask about their authors, dates, characters and places.";

SamplerParams greedy() {
    SamplerParams p;
    p.temperature = 0.0f;
    return p;
}

GenerateOptions short_replies(std::vector<std::vector<float>>* sampled_logits = nullptr, int64_t max_tokens = 16) {
    GenerateOptions o;
    o.max_tokens = max_tokens;
    if (sampled_logits != nullptr) {
        o.on_sample = [sampled_logits](std::span<const float> logits, int32_t) {
            sampled_logits->emplace_back(logits.begin(), logits.end());
        };
    }
    return o;
}

std::vector<int32_t> tokens_of(const State& s) { return {s.tokens().begin(), s.tokens().end()}; }

std::vector<int32_t> encode(const Model& model, const std::string& text) {
    return model.tokenizer().encode(text, AddSpecial::no, ParseSpecial::yes);
}

// Logits after the last of `tokens`, evaluated in one pass from an empty State.
std::vector<float> cold_logits(Evaluator& evaluator, std::span<const int32_t> tokens) {
    State fresh(evaluator.model());
    evaluator.eval(fresh, tokens);
    return {fresh.last_logits().begin(), fresh.last_logits().end()};
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class SessionTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kvstash_session_test_" + std::to_string(getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    fs::path dir_;
};

TEST_F(SessionTest, EachTurnComputesOnlyItsOwnTokensAndMatchesAColdEvaluation) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(default_model_path());
    Evaluator evaluator(model, 2);
    const ChatTemplate tmpl = ChatTemplate::for_model(*model);
    Session chat(evaluator, tmpl, kSystem);
    ASSERT_EQ(chat.state().n_tokens(), chat.system_tokens()) << "the system block is evaluated at construction";
    Sampler sampler(greedy());

    const std::vector<std::string> questions = {"Who wrote Persuasion?", "When was it published?", "Name its heroine.",
                                                "Thank you!"};
    int turns_ended_by_the_model = 0;
    for (size_t turn = 0; turn < questions.size(); ++turn) {
        SCOPED_TRACE(questions[turn]);
        const std::vector<int32_t> before = tokens_of(chat.state());
        std::vector<ChatMessage> rendered = chat.messages();
        rendered.push_back({"user", questions[turn]});
        const std::string text = tmpl.render(rendered, AddGenerationPrompt::yes);
        const std::string held_text = model->tokenizer().decode(before);
        ASSERT_TRUE(text.starts_with(held_text));
        // The new turn's tokens, from the rendering: what follows the held tokens' text.
        const auto expected = static_cast<int64_t>(encode(*model, text.substr(held_text.size())).size());
        if (turn > 0) {
            // Independent of that arithmetic: ChatML closes the reply with "\n" after the <|im_end|> the
            // model generated (end_of_turn_suffix), or with "<|im_end|>\n" when max_tokens cut the reply;
            // then come the user turn and the assistant header.
            const bool ended_turn = model->tokenizer().is_eog(before.back());
            turns_ended_by_the_model += ended_turn ? 1 : 0;
            const std::string closing = ended_turn ? tmpl.end_of_turn_suffix() : "<|im_end|>\n";
            const std::string turn_text =
                closing + "<|im_start|>user\n" + questions[turn] + "<|im_end|>\n<|im_start|>assistant\n";
            EXPECT_EQ(expected, static_cast<int64_t>(encode(*model, turn_text).size()));
        }

        std::vector<std::vector<float>> sampled;
        // 32 tokens: some replies end with <|im_end|>, some are cut (SmolLM2, greedy); both paths are tested.
        const GenerateResult r = chat.reply(questions[turn], sampler, short_replies(&sampled, 32));
        EXPECT_TRUE(chat.last_turn().appended);
        EXPECT_EQ(chat.last_computed(), expected);
        EXPECT_EQ(chat.last_reused(), static_cast<int64_t>(before.size()));
        const std::vector<int32_t> after = tokens_of(chat.state());
        ASSERT_GE(after.size(), before.size());
        EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin())) << "earlier tokens were re-encoded";
        // The generated ids are kept as generated.
        EXPECT_TRUE(
            std::equal(r.tokens.begin(), r.tokens.end(), after.end() - static_cast<ptrdiff_t>(r.tokens.size())));
        ASSERT_FALSE(sampled.empty());
        const auto prompt = std::span<const int32_t>(after).first(static_cast<size_t>(chat.last_turn().prompt_tokens));
        EXPECT_TRUE(same_bits(sampled.front(), cold_logits(evaluator, prompt)))
            << "first sampled logits differ from a cold pass";
        EXPECT_TRUE(same_bits(chat.state().last_logits(), cold_logits(evaluator, after)))
            << "final logits differ from a cold pass";
    }
    EXPECT_EQ(chat.turn_starts().size(), questions.size());
    EXPECT_GT(turns_ended_by_the_model, 0)
        << "no reply ended with <|im_end|>: the end-of-turn suffix path went untested";
}

TEST_F(SessionTest, TwoSessionsShareOneSystemPromptThroughTheCache) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(default_model_path());
    Evaluator evaluator(model, 2);
    const ChatTemplate tmpl = ChatTemplate::for_model(*model);
    PrefixCache cache(*model);
    Sampler sa(greedy()), sb(greedy());

    Session a(evaluator, tmpl, kSystem, {.state = {}, .cache = &cache});
    ASSERT_GT(a.system_tokens(), 64) << "the test needs a system prompt of several KV blocks";
    EXPECT_EQ(a.state().n_tokens(), 0) << "with a cache, nothing is computed before the first turn";
    a.reply("Who wrote Persuasion?", sa, short_replies());
    EXPECT_EQ(a.last_reused(), 0);
    EXPECT_EQ(a.last_computed(), a.last_turn().prompt_tokens);

    Session b(evaluator, tmpl, kSystem, {.state = {}, .cache = &cache});
    std::vector<std::vector<float>> sampled;
    const GenerateResult rb = b.reply("What is a sonnet?", sb, short_replies(&sampled));
    EXPECT_GE(b.last_reused(), b.system_tokens()) << "the second session recomputed the system prompt";
    EXPECT_LE(b.last_computed(), b.last_turn().prompt_tokens - b.system_tokens());
    EXPECT_EQ(b.last_reused() + b.last_computed(), b.last_turn().prompt_tokens);
    const std::vector<int32_t> tb = tokens_of(b.state());
    EXPECT_TRUE(
        same_bits(sampled.front(),
                  cold_logits(evaluator, std::span(tb).first(static_cast<size_t>(b.last_turn().prompt_tokens)))));

    // The same question in a session without the cache gives the same reply, token for token.
    Session alone(evaluator, tmpl, kSystem);
    Sampler sc(greedy());
    EXPECT_EQ(alone.reply("What is a sonnet?", sc, short_replies()).tokens, rb.tokens);
    EXPECT_EQ(tokens_of(alone.state()), tb);

    // Later turns of a cached session append as usual.
    a.reply("In which year?", sa, short_replies());
    EXPECT_TRUE(a.last_turn().appended);
    EXPECT_GT(cache.stats().tokens_reused, 0u);
}

TEST_F(SessionTest, UndoCutsBackWithoutRecomputingAndResetKeepsTheSystemBlock) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(default_model_path());
    Evaluator evaluator(model, 2);
    Session chat(evaluator, ChatTemplate::for_model(*model), kSystem);
    Sampler sampler(greedy());
    EXPECT_FALSE(chat.undo());

    chat.reply("Who wrote Persuasion?", sampler, short_replies());
    const std::vector<int32_t> after_first = tokens_of(chat.state());
    const GenerateResult second = chat.reply("When was it published?", sampler, short_replies());
    const int64_t second_computed = chat.last_computed();
    ASSERT_EQ(chat.messages().size(), 5u);

    ASSERT_TRUE(chat.undo());
    EXPECT_EQ(chat.messages().size(), 3u);
    EXPECT_EQ(tokens_of(chat.state()), after_first) << "undo must cut back to exactly the end of the first exchange";
    EXPECT_EQ(chat.turn_starts().size(), 1u);

    // Asking again computes the same new turn and gives the same reply.
    EXPECT_EQ(chat.reply("When was it published?", sampler, short_replies()).tokens, second.tokens);
    EXPECT_EQ(chat.last_computed(), second_computed);
    EXPECT_TRUE(chat.last_turn().appended);

    ASSERT_TRUE(chat.undo());
    ASSERT_TRUE(chat.undo());
    EXPECT_FALSE(chat.undo());
    EXPECT_EQ(chat.state().n_tokens(), chat.system_tokens());
    EXPECT_EQ(chat.messages().size(), 1u);

    chat.reply("Hi", sampler, short_replies());
    chat.reset();
    EXPECT_EQ(chat.messages().size(), 1u);
    EXPECT_EQ(chat.state().n_tokens(), chat.system_tokens());
    chat.reply("Hi", sampler, short_replies());
    EXPECT_EQ(chat.last_reused(), chat.system_tokens());
}

TEST_F(SessionTest, SavedAfterTwoTurnsResumesExactlyAsNeverSaving) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(default_model_path());
    Evaluator evaluator(model, 2);
    const ChatTemplate tmpl = ChatTemplate::for_model(*model);
    // Sampled with temperature, so that the RNG's position is part of what must survive the file.
    SamplerParams params;
    params.temperature = 0.8f;
    params.seed = 42;
    Session chat(evaluator, tmpl, kSystem);
    Sampler sampler(params);
    chat.reply("Who wrote Persuasion?", sampler, short_replies());
    chat.reply("When was it published?", sampler, short_replies());
    chat.save(path("chat.kvs"));
    const std::vector<int64_t> saved_starts = chat.turn_starts();

    std::vector<std::vector<float>> kept_logits, resumed_logits;
    const GenerateResult kept = chat.reply("Name its heroine.", sampler, short_replies(&kept_logits));

    Session resumed = Session::open(evaluator, tmpl, path("chat.kvs"));
    EXPECT_EQ(resumed.messages().size(), 5u);
    EXPECT_EQ(resumed.turn_starts().size(), 2u);
    ASSERT_NE(resumed.state().sampler_state(), nullptr);
    Sampler resumed_sampler(*resumed.state().sampler_state());
    const GenerateResult again = resumed.reply("Name its heroine.", resumed_sampler, short_replies(&resumed_logits));
    EXPECT_EQ(again.tokens, kept.tokens);
    EXPECT_EQ(again.text, kept.text);
    EXPECT_EQ(resumed.last_computed(), chat.last_computed());
    ASSERT_EQ(resumed_logits.size(), kept_logits.size());
    for (size_t i = 0; i < kept_logits.size(); ++i)
        EXPECT_TRUE(same_bits(resumed_logits[i], kept_logits[i])) << "position " << i;
    EXPECT_EQ(tokens_of(resumed.state()), tokens_of(chat.state()));

    // Load into an existing session (the REPL's /load), then undo works on the loaded turns.
    Session other(evaluator, tmpl, "Another system prompt.");
    other.load(path("chat.kvs"));
    EXPECT_EQ(other.messages().size(), 5u);
    EXPECT_EQ(other.messages()[0].content, kSystem);
    ASSERT_TRUE(other.undo());
    ASSERT_EQ(saved_starts.size(), 2u);
    EXPECT_EQ(other.state().n_tokens(), saved_starts[1]);

    // A session file is a plain state file too.
    const StateFileInfo info = inspect_state_file(path("chat.kvs"), Checksums::verify);
    EXPECT_TRUE(info.has_session);
    EXPECT_TRUE(info.checksums_ok);
    const State plain = load_state(*model, path("chat.kvs"));
    EXPECT_EQ(plain.n_tokens(), info.n_tokens);
}

TEST_F(SessionTest, FilesThatAreNotThisSessionAreRefusedAndLeaveItUnchanged) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(default_model_path());
    Evaluator evaluator(model, 2);
    const ChatTemplate tmpl = ChatTemplate::for_model(*model);
    Session chat(evaluator, tmpl, "Be brief.");
    Sampler sampler(greedy());
    chat.reply("Hi", sampler, short_replies());
    chat.save(path("good.kvs"));
    save_state(chat.state(), path("plain.kvs"));
    const std::string bad_json = "{\"format\": \"kvstash-session\", \"version\": 1, \"messages\": [";
    save_state(chat.state(), path("bad_json.kvs"), {}, bad_json);
    const std::string newer =
        R"({"format": "kvstash-session", "version": 9, "template": "chatml", "messages": [], "turn_starts": []})";
    save_state(chat.state(), path("newer.kvs"), {}, newer);
    const std::string dangling = R"({"format": "kvstash-session", "version": 1, "template": "chatml",
                           "messages": [{"role": "user", "content": "Hi"}], "turn_starts": []})";
    save_state(chat.state(), path("dangling.kvs"), {}, dangling);
    const std::string past_end = R"({"format": "kvstash-session", "version": 1, "template": "chatml",
                           "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
                           "turn_starts": [100000]})";
    save_state(chat.state(), path("past_end.kvs"), {}, past_end);

    struct Case {
        std::string file;
        ErrorCode code;
        std::string message_part;
    };
    const std::vector<Case> cases = {
        {path("missing.kvs"), ErrorCode::io, "missing.kvs"},
        {path("plain.kvs"), ErrorCode::invalid_argument, "without a chat session"},
        {path("bad_json.kvs"), ErrorCode::bad_format, "not valid JSON"},
        {path("newer.kvs"), ErrorCode::unsupported, "newer"},
        {path("dangling.kvs"), ErrorCode::bad_format, "without the assistant's reply"},
        {path("past_end.kvs"), ErrorCode::bad_format, "turn start 100000"},
    };
    Session target(evaluator, tmpl, "Be brief.");
    target.reply("Hello there", sampler, short_replies());
    const std::vector<int32_t> target_tokens = tokens_of(target.state());
    for (const Case& c : cases) {
        SCOPED_TRACE(c.file);
        try {
            target.load(c.file);
            ADD_FAILURE() << "loaded";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), c.code) << e.what();
            EXPECT_NE(std::string(e.what()).find(c.message_part), std::string::npos) << e.what();
        }
        EXPECT_EQ(target.messages().size(), 3u);
        EXPECT_EQ(tokens_of(target.state()), target_tokens);
    }

    // Another chat template: refused, naming the one to use.
    Session llama3(evaluator, ChatTemplate::named("llama3"), "Be brief.");
    try {
        llama3.load(path("good.kvs"));
        ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("with the 'chatml' template"), std::string::npos) << e.what();
    }

    // Another model: refused by the state file's fingerprint.
    auto tiny = Model::load(fixture_path("tiny/gqa_f32.gguf"));
    Evaluator tiny_evaluator(tiny, 1);
    try {
        Session::open(tiny_evaluator, tmpl, path("good.kvs"));
        ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("fingerprint"), std::string::npos) << e.what();
    }
}

// Without a cache: the system prompt is evaluated at construction and every turn reuses the earlier ones.
TEST(Session, LaterTurnsReuseEarlierOnesAndMatchAFreshComputation) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(default_model_path());
    Evaluator evaluator(model, 2);
    Session chat(evaluator, ChatTemplate::for_model(*model), "You answer in one short sentence.");
    GenerateOptions options;
    options.max_tokens = 24;
    Sampler sampler(greedy());
    chat.reply("What is the capital of France?", sampler, options);
    const int64_t after_first = chat.state().n_tokens();
    EXPECT_GT(chat.last_reused(), 0) << "the system prompt should have been cached at construction";
    chat.reply("And of Italy?", sampler, options);
    EXPECT_GE(chat.last_reused(), after_first / 2) << "the second turn recomputed the first";
    ASSERT_EQ(chat.messages().size(), 5u);
    EXPECT_EQ(chat.messages()[4].role, "assistant");

    // The state's logits equal evaluating its tokens from scratch, bitwise.
    const std::vector<int32_t> tokens(chat.state().tokens().begin(), chat.state().tokens().end());
    State fresh(*model);
    evaluator.eval(fresh, tokens);
    ASSERT_EQ(fresh.last_logits().size(), chat.state().last_logits().size());
    EXPECT_EQ(
        0, std::memcmp(fresh.last_logits().data(), chat.state().last_logits().data(), fresh.last_logits().size() * 4));

    chat.reset();
    EXPECT_EQ(chat.messages().size(), 1u);
    chat.reply("Hi", sampler, options);
    EXPECT_GT(chat.last_reused(), 5);
}

}  // namespace
}  // namespace kvstash::test
