// Speculative decoding inside the server's continuous batching (server/speculative_step.h): jobs with
// prompt lookup or a draft model, batched with jobs without, each with its own draft length, give
// exactly what generate() without speculation gives each prompt alone (text, logprobs from the logits
// each token was sampled from, finish reason); /metrics counts the guesses. Also the speculative.*
// request fields.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "e2e/server/channel_collect.h"
#include "e2e/server/http_client.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/grammar.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "kvstash/tokenizer.h"
#include "server/api_error.h"
#include "server/scheduler.h"
#include "server/sequence.h"
#include "server/speculative_fields.h"
#include "support/paths.h"

namespace kvstash::server {
namespace {

SamplerParams sampling(uint64_t seed, float temperature) {
    SamplerParams p;
    p.temperature = temperature;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.1f;
    p.seed = seed;
    return p;
}

struct Case {
    std::string prompt;
    JobSpeculation::Mode mode;
    int32_t n_max;
    float temperature;
    bool json = false;
};

TEST(ServerSpeculative, BatchedSpeculativeJobsEqualGenerateAlone) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(test::default_model_path());
    const Tokenizer& tok = model->tokenizer();
    const std::string doc =
        "<|im_start|>user\nRepeat this sentence twice: Alice met Bob at the old mill by the river, and they talked "
        "about the harvest until dark.<|im_end|>\n<|im_start|>assistant\n";
    const std::vector<Case> cases = {
        {doc, JobSpeculation::Mode::lookup, 8, 0.0f},
        {doc, JobSpeculation::Mode::lookup, 3, 0.8f},
        {doc, JobSpeculation::Mode::none, 0, 0.8f},
        {doc, JobSpeculation::Mode::draft, 5, 0.0f},
        {"Once upon a time", JobSpeculation::Mode::draft, 4, 0.9f},
        {"Give a JSON object with a name: ", JobSpeculation::Mode::lookup, 6, 0.7f, true},
    };
    const int64_t max_tokens = 28;
    Metrics metrics;
    SchedulerOptions options;
    options.threads = 2;
    options.parallel = 6;
    options.step_tokens = 11;
    options.draft_model = model;  // the model as its own draft: its guesses hold where sampling is greedy
    Scheduler scheduler(model, options, metrics);
    const auto vocabulary = GrammarVocabulary::build(tok);
    const auto grammar = Grammar::json_object();

    std::vector<std::shared_ptr<RequestChannel>> channels;
    for (size_t i = 0; i < cases.size(); ++i) {
        auto job = std::make_unique<GenerationJob>();
        job->prompt = tok.encode(cases[i].prompt, AddSpecial::yes, ParseSpecial::yes);
        job->sampling = sampling(10 + i, cases[i].temperature);
        job->max_tokens = max_tokens;
        job->top_logprobs = 0;
        job->n = i == 1 ? 2 : 1;
        job->speculation.mode = cases[i].mode;
        job->speculation.options.max_draft = std::max(cases[i].n_max, 1);
        if (cases[i].json) {
            job->grammar = grammar;
            job->grammar_vocabulary = vocabulary;
        }
        channels.push_back(job->channel);
        ASSERT_TRUE(scheduler.submit(std::move(job)));
    }
    std::vector<Served> served;
    for (auto& channel : channels) served.push_back(collect(*channel));

    Evaluator evaluator(model, 2);
    for (size_t i = 0; i < cases.size(); ++i) {
        ASSERT_TRUE(served[i].error.empty()) << served[i].error;
        for (int c = 0; c < (i == 1 ? 2 : 1); ++c) {
            State state(*model);
            evaluator.eval(state, tok.encode(cases[i].prompt, AddSpecial::yes, ParseSpecial::yes));
            SamplerParams params = sampling(10 + i, cases[i].temperature);
            params.seed += static_cast<uint64_t>(c);
            Sampler sampler(params);
            GenerateOptions g;
            g.max_tokens = max_tokens;
            if (cases[i].json) g.constraint = std::make_shared<GrammarConstraint>(grammar, vocabulary);
            std::vector<double> logprobs;
            g.on_sample = [&](std::span<const float> logits, int32_t token) {
                if (!tok.is_eog(token)) logprobs.push_back(token_logprob(logits, token, 0).logprob);
            };
            const GenerateResult expected = generate(evaluator, state, sampler, g);
            EXPECT_EQ(served[i].text[c], expected.text) << "case " << i << " choice " << c;
            EXPECT_EQ(served[i].logprobs[c], logprobs) << "case " << i << " choice " << c;  // exact doubles
            EXPECT_EQ(served[i].finish[c], expected.stop == StopReason::max_tokens ? "length" : "stop");
        }
    }
    const std::string rendered = metrics.render(PrefixCacheStats{}, StateStoreTotals{});
    const auto value = [&rendered](const std::string& name) {
        const size_t at = rendered.find("\n" + name + " ");
        return at == std::string::npos ? -1.0 : std::stod(rendered.substr(at + name.size() + 2));
    };
    EXPECT_GT(value("kvstash_speculative_drafted_tokens_total"), 0.0) << rendered;
    EXPECT_GT(value("kvstash_speculative_accepted_tokens_total"), 0.0) << rendered;
    EXPECT_LE(value("kvstash_speculative_accepted_tokens_total"), value("kvstash_speculative_drafted_tokens_total"));
}

TEST(ServerSpeculative, SlidingWindowJobsSpeculateAndEqualGenerateAlone) {
    // Gemma 3 (sliding-window layers, window 512, trimmed to two windows behind the last position): a
    // 1,100-token prompt, so that the sequences' states trim while they verify guesses (held back until the
    // guesses are decided: server/speculative_step.cpp). Their text and logprobs are generate()'s alone.
    const char* dir = std::getenv("KVSTASH_MODELS_DIR");
    const std::string path = (dir != nullptr && *dir != '\0' ? std::string(dir) : test::source_dir() + "/models") +
                             "/gemma-3-270m-q4_k_m.gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found: run scripts/fetch_model.sh gemma3";
    auto model = Model::load(path);
    const Tokenizer& tok = model->tokenizer();
    std::string text = "<start_of_turn>user\nRepeat the last line of this list.\n";
    for (int i = 0; tok.encode(text, AddSpecial::yes, ParseSpecial::yes).size() < 1100; ++i) {
        text +=
            "Line " + std::to_string(i) + ": the miller's daughter carried the grain to the old mill by the river.\n";
    }
    text += "<end_of_turn>\n<start_of_turn>model\n";
    const std::vector<int32_t> prompt = tok.encode(text, AddSpecial::yes, ParseSpecial::yes);
    const std::vector<std::pair<int32_t, float>> cases = {{8, 0.0f}, {4, 0.8f}, {0, 0.8f}};  // n_max, temperature
    const int64_t max_tokens = 40;
    Metrics metrics;
    SchedulerOptions options;
    options.threads = 2;
    options.parallel = 3;
    Scheduler scheduler(model, options, metrics);
    std::vector<std::shared_ptr<RequestChannel>> channels;
    for (size_t i = 0; i < cases.size(); ++i) {
        auto job = std::make_unique<GenerationJob>();
        job->prompt = prompt;
        job->sampling = sampling(20 + i, cases[i].second);
        job->max_tokens = max_tokens;
        job->top_logprobs = 0;
        job->speculation.mode = cases[i].first > 0 ? JobSpeculation::Mode::lookup : JobSpeculation::Mode::none;
        job->speculation.options.max_draft = std::max(cases[i].first, 1);
        channels.push_back(job->channel);
        ASSERT_TRUE(scheduler.submit(std::move(job)));
    }
    std::vector<Served> served;
    for (auto& channel : channels) served.push_back(collect(*channel));
    Evaluator evaluator(model, 2);
    State prefilled(*model, StateOptions{.n_ctx = 2048});
    evaluator.eval(prefilled, prompt);
    for (size_t i = 0; i < cases.size(); ++i) {
        ASSERT_TRUE(served[i].error.empty()) << served[i].error;
        State state = prefilled.fork();
        Sampler sampler(sampling(20 + i, cases[i].second));
        GenerateOptions g;
        g.max_tokens = max_tokens;
        std::vector<double> logprobs;
        g.on_sample = [&](std::span<const float> logits, int32_t token) {
            if (!tok.is_eog(token)) logprobs.push_back(token_logprob(logits, token, 0).logprob);
        };
        const GenerateResult expected = generate(evaluator, state, sampler, g);
        EXPECT_EQ(served[i].text[0], expected.text) << "case " << i;
        EXPECT_EQ(served[i].logprobs[0], logprobs) << "case " << i;
        EXPECT_GT(state.truncate_floor(), 0) << "the sliding layers were trimmed";
    }
    const std::string rendered = metrics.render(PrefixCacheStats{}, StateStoreTotals{});
    const std::string accepted = "\nkvstash_speculative_accepted_tokens_total ";
    const size_t at = rendered.find(accepted);
    ASSERT_NE(at, std::string::npos) << rendered;
    EXPECT_GT(std::stod(rendered.substr(at + accepted.size())), 0.0) << "Gemma 3's jobs speculated: " << rendered;
}

TEST(ServerSpeculative, RequestFieldsResolveAgainstTheServerDefault) {
    const JobSpeculation none;
    JobSpeculation lookup;
    lookup.mode = JobSpeculation::Mode::lookup;
    auto parse = [](const char* json) { return parse_speculative_fields(nlohmann::json::parse(json)); };
    EXPECT_EQ(resolve_speculation(parse("{}"), none, false).mode, JobSpeculation::Mode::none);
    EXPECT_EQ(resolve_speculation(parse("{}"), lookup, false).mode, JobSpeculation::Mode::lookup);
    const JobSpeculation on = resolve_speculation(parse(R"({"speculative.n_max": 5})"), none, false);
    EXPECT_EQ(on.mode, JobSpeculation::Mode::lookup);
    EXPECT_EQ(on.options.max_draft, 5);
    EXPECT_EQ(resolve_speculation(parse(R"({"speculative.n_max": 0})"), lookup, false).mode,
              JobSpeculation::Mode::none);
    const JobSpeculation draft = resolve_speculation(
        parse(R"({"speculative.type": "draft", "speculative.n_min": 2, "speculative.p_min": 0.5})"), none, true);
    EXPECT_EQ(draft.mode, JobSpeculation::Mode::draft);
    EXPECT_EQ(draft.options.min_draft, 2);
    EXPECT_FLOAT_EQ(draft.p_min, 0.5f);
    EXPECT_THROW(resolve_speculation(parse(R"({"speculative.type": "draft"})"), none, false), ApiError);
    EXPECT_THROW(parse(R"({"speculative.type": "medusa"})"), ApiError);
    EXPECT_THROW(parse(R"({"speculative.n_max": 65})"), ApiError);
    EXPECT_THROW(parse(R"({"speculative.p_min": "high"})"), ApiError);
    EXPECT_THROW(resolve_speculation(parse(R"({"speculative.n_max": 2, "speculative.n_min": 3})"), none, false),
                 ApiError);
}

TEST(ServerSpeculative, HttpRequestsWithAndWithoutSpeculationAnswerAlike) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    // A server speculating by default (--spec lookup): requests opting out ("speculative.n_max": 0) and
    // in with other lengths get the same bytes of text and the same logprobs; /metrics counts the guesses.
    test::ServerProcess server({"-t", "2", "--spec", "lookup", "--spec-max", "4"});
    httplib::Client client = server.client();
    const nlohmann::json base = {
        {"messages", {{{"role", "user"}, {"content", "Repeat: the cat sat on the mat by the door."}}}},
        {"max_tokens", 40},
        {"seed", 7},
        {"temperature", 0.0},
        {"logprobs", true}};
    std::vector<nlohmann::json> answers;
    for (const nlohmann::json& extra : {nlohmann::json{{"speculative.n_max", 0}}, nlohmann::json::object(),
                                        nlohmann::json{{"speculative.n_max", 8}, {"speculative.n_min", 2}}}) {
        nlohmann::json body = base;
        body.update(extra);
        const test::Reply r = test::post(client, "/v1/chat/completions", body);
        ASSERT_EQ(r.status, 200) << r.text;
        answers.push_back(r.body["choices"][0]);
    }
    EXPECT_EQ(answers[0]["message"]["content"], answers[1]["message"]["content"]);
    EXPECT_EQ(answers[0]["logprobs"], answers[1]["logprobs"]);
    EXPECT_EQ(answers[0]["message"]["content"], answers[2]["message"]["content"]);
    EXPECT_EQ(answers[0]["logprobs"], answers[2]["logprobs"]);
    const test::Reply bad = test::post(client, "/v1/chat/completions",
                                       nlohmann::json{{"messages", base["messages"]}, {"speculative.type", "draft"}});
    EXPECT_EQ(bad.status, 400) << bad.text;
    const std::string metrics = test::get(client, "/metrics").text;
    EXPECT_GT(test::metric_value(metrics, "kvstash_speculative_drafted_tokens_total"), 0.0) << metrics;
}

}  // namespace
}  // namespace kvstash::server
