// The job builder (server/request_job.h) on a tiny model: a parsed request becomes the tokens the
// tokenizer and chat template give, the context and vocabulary limits are enforced with 400s naming the
// field, and named states are continued (404 when unknown, 400 when they do not start the conversation).
#include <gtest/gtest.h>

#include <string>

#include "kvstash/tokenizer.h"
#include "server/api_error.h"
#include "server/request_job.h"
#include "support/paths.h"

namespace kvstash::server {
namespace {

using nlohmann::json;

constexpr int64_t kCtx = 256;  // a chatml conversation takes ~90 tokens of the tiny vocabulary

class RequestJob : public ::testing::Test {
protected:
    void SetUp() override {
        model_ = Model::load(test::fixture_path("tiny/gqa_f32.gguf"));
        ctx_.model = model_;
        ctx_.options.parallel = 2;
        ctx_.chat_template = ChatTemplate::named("chatml");
        ctx_.states = std::make_unique<StateStore>(*model_, "");
        SchedulerOptions options;
        options.threads = 1;
        options.parallel = 2;
        options.n_ctx = kCtx;
        ctx_.scheduler = std::make_unique<Scheduler>(model_, options, ctx_.metrics);
    }

    std::unique_ptr<GenerationJob> completion(const std::string& body, bool chat) {
        return build_completion_job(
            parse_completion_request(parse_json_body(body), chat ? Endpoint::chat : Endpoint::text,
                                     request_limits(ctx_)),
            ctx_);
    }
    std::vector<int32_t> encode(const std::string& text, AddSpecial add_special) const {
        return model_->tokenizer().encode(text, add_special, ParseSpecial::yes);
    }
    // Stores the state after `tokens` as `name`.
    void put_state(const std::string& name, const std::vector<int32_t>& tokens) {
        State state(*model_, StateOptions{KvType::f16, kCtx});
        Evaluator evaluator(model_, 1);
        evaluator.eval(state, tokens);
        ctx_.states->put(name, std::move(state));
    }

    std::shared_ptr<const Model> model_;
    ServerContext ctx_;
};

template <typename Fn>
void expect_api_error(Fn fn, int status, const std::string& param, const std::string& code,
                      const std::string& message_part) {
    try {
        fn();
        ADD_FAILURE() << "accepted; expected " << status << " on '" << param << "'";
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), status) << e.what();
        EXPECT_EQ(e.param(), param) << e.what();
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_NE(std::string(e.what()).find(message_part), std::string::npos) << e.what();
    }
}

TEST_F(RequestJob, TextPromptIsTokenizedWithBosAndDefaultsTo16Tokens) {
    const auto job = completion(R"({"prompt": "the cat sat", "seed": 9, "n": 2, "stop": "x", "logprobs": 1})", false);
    EXPECT_EQ(job->kind, GenerationJob::Kind::complete);
    EXPECT_EQ(job->prompt, encode("the cat sat", AddSpecial::yes));
    EXPECT_EQ(job->max_tokens, 16);
    EXPECT_EQ(job->sampling.seed, 9u);
    EXPECT_EQ(job->n, 2);
    EXPECT_EQ(job->stop, std::vector<std::string>{"x"});
    EXPECT_EQ(job->top_logprobs, 1);
    EXPECT_FALSE(job->base);
    EXPECT_EQ(completion(R"({"prompt": "a", "max_tokens": 40})", false)->max_tokens, 40);
}

TEST_F(RequestJob, ChatIsRenderedWithTheTemplateAndTakesTheRestOfTheContext) {
    const std::string body = R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true})";
    const auto job = completion(body, true);
    const std::vector<ChatMessage> messages = {{"user", "hi"}};
    const std::vector<int32_t> expected =
        encode(ctx_.chat_template->render(messages, AddGenerationPrompt::yes), AddSpecial::no);
    EXPECT_EQ(job->prompt, expected);
    EXPECT_EQ(job->max_tokens, kCtx - static_cast<int64_t>(expected.size()));
    EXPECT_EQ(job->top_logprobs, 0);
}

TEST_F(RequestJob, WithoutAChatTemplateChatIsRefusedWithTheServersReason) {
    ctx_.chat_template.reset();
    ctx_.chat_template_error = "no template here";
    expect_api_error([&] { completion(R"({"messages": [{"role": "user", "content": "hi"}]})", true); }, 400, "messages",
                     "no_chat_template", "no template here");
}

TEST_F(RequestJob, ContextAndVocabularyLimitsNameTheField) {
    std::string long_prompt;
    for (int i = 0; i < 200; ++i) long_prompt += "the cat sat ";
    ASSERT_GE(encode(long_prompt, AddSpecial::yes).size(), static_cast<size_t>(kCtx));
    expect_api_error([&] { completion(R"({"prompt": ")" + long_prompt + "\"}", false); }, 400, "prompt",
                     "context_length_exceeded", "but the context holds " + std::to_string(kCtx));
    expect_api_error([&] { completion(R"({"prompt": "a", "max_tokens": )" + std::to_string(kCtx) + "}", false); }, 400,
                     "max_tokens", "context_length_exceeded", "reduce max_tokens to at most");
    const std::string bias = R"({"prompt": "a", "logit_bias": {")" + std::to_string(model_->n_vocab()) + R"(": 1}})";
    expect_api_error([&] { completion(bias, false); }, 400, "logit_bias", "invalid_value", "outside the vocabulary");
    const std::string last =
        R"({"prompt": "a", "logit_bias": {")" + std::to_string(model_->n_vocab() - 1) + R"(": 1}})";
    EXPECT_NO_THROW(completion(last, false));
}

TEST_F(RequestJob, NamedStatesAreContinued) {
    expect_api_error([&] { completion(R"({"prompt": "a", "state": "nope"})", false); }, 404, "state", "state_not_found",
                     "no state named 'nope'");

    const std::vector<int32_t> held = encode("the cat", AddSpecial::yes);
    put_state("cat", held);
    const auto job = completion(R"({"prompt": " sat", "state": "cat"})", false);
    ASSERT_TRUE(job->base);
    EXPECT_EQ(job->base->n_tokens(), static_cast<int64_t>(held.size()));
    EXPECT_EQ(job->prompt, encode(" sat", AddSpecial::no)) << "a continued state already has its BOS";
    const auto as_is = completion(R"({"state": "cat"})", false);
    EXPECT_TRUE(as_is->prompt.empty());

    // Chat: the state must hold the start of the rendered conversation; the job evaluates the rest.
    const std::vector<ChatMessage> system = {{"system", "Be brief."}};
    put_state("sys", encode(ctx_.chat_template->render(system, AddGenerationPrompt::no), AddSpecial::no));
    const auto chat = completion(
        R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], "state": "sys"})",
        true);
    const std::vector<int32_t> whole =
        encode(ctx_.chat_template->render({{"system", "Be brief."}, {"user", "hi"}}, AddGenerationPrompt::yes),
               AddSpecial::no);
    const size_t n_held = static_cast<size_t>(chat->base->n_tokens());
    EXPECT_EQ(chat->prompt, std::vector<int32_t>(whole.begin() + static_cast<std::ptrdiff_t>(n_held), whole.end()));
    expect_api_error([&] { completion(R"({"messages": [{"role": "user", "content": "hi"}], "state": "cat"})", true); },
                     400, "state", "state_mismatch", "not the start of this conversation");
}

TEST_F(RequestJob, PrefillJobsHoldThePromptTokens) {
    const auto text =
        build_prefill_job(parse_prefill_request(parse_json_body(R"({"name": "a", "prompt": "x y"})")), ctx_);
    EXPECT_EQ(text->kind, GenerationJob::Kind::prefill);
    EXPECT_EQ(text->prompt, encode("x y", AddSpecial::yes));
    const auto chat = build_prefill_job(
        parse_prefill_request(parse_json_body(R"({"name": "a", "messages": [{"role": "system", "content": "s"}]})")),
        ctx_);
    EXPECT_EQ(chat->prompt,
              encode(ctx_.chat_template->render({{"system", "s"}}, AddGenerationPrompt::no), AddSpecial::no));
    std::string long_prompt;
    for (int i = 0; i < 200; ++i) long_prompt += "the cat sat ";
    expect_api_error(
        [&] {
            build_prefill_job(
                parse_prefill_request(parse_json_body(R"({"name": "a", "prompt": ")" + long_prompt + "\"}")), ctx_);
        },
        400, "prompt", "context_length_exceeded", "but the context holds " + std::to_string(kCtx));
}

}  // namespace
}  // namespace kvstash::server
