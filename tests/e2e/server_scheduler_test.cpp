// The server's scheduler without HTTP: jobs served together — prompts evaluated in odd-sized chunks
// (step_tokens 7) within batched steps, prefixes taken from the prefix cache, n > 1 choices forked —
// give exactly what the library's generate() gives each prompt alone: the same tokens and text, and the
// same logprobs (computed from the logits each token was sampled from, so equal logprobs mean equal
// logits bit for bit).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>

#include "e2e/server/channel_collect.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "kvstash/tokenizer.h"
#include "server/scheduler.h"
#include "server/sequence.h"
#include "support/paths.h"

namespace kvstash::server {
namespace {

SamplerParams seeded(uint64_t seed) {
    SamplerParams p;
    p.temperature = 0.9f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

TEST(ServerScheduler, BatchedChunkedCachedEqualsGenerateAlone) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(test::default_model_path());
    const Tokenizer& tok = model->tokenizer();
    std::string shared = "The following is a conversation about gardening, cooking and the weather in spring. ";
    shared += shared + shared;  // > 2 KV blocks shared by several prompts: the prefix cache serves them
    const std::vector<std::string> prompts = {shared + "Tomatoes need", shared + "The best soup is",
                                              "Once upon a time",       shared + "Rain in April",
                                              "def add(a, b):",         "The capital of France is"};
    const int64_t max_tokens = 12;

    Metrics metrics;
    SchedulerOptions options;
    options.threads = 2;
    options.parallel = 5;
    options.queue = 32;
    options.step_tokens = 7;  // odd chunks, crossing 32-token blocks at varying offsets
    Scheduler scheduler(model, options, metrics);

    std::vector<std::shared_ptr<RequestChannel>> channels;
    std::vector<std::vector<int32_t>> tokens;
    for (size_t i = 0; i < prompts.size(); ++i) {
        auto job = std::make_unique<GenerationJob>();
        job->prompt = tok.encode(prompts[i], AddSpecial::yes, ParseSpecial::yes);
        job->sampling = seeded(100 + i);
        job->max_tokens = max_tokens;
        job->n = i == 1 ? 2 : 1;  // choice c uses seed + c
        job->top_logprobs = 0;
        tokens.push_back(job->prompt);
        channels.push_back(job->channel);
        ASSERT_TRUE(scheduler.submit(std::move(job)));
    }
    auto prefill = std::make_unique<GenerationJob>();
    prefill->kind = GenerationJob::Kind::prefill;
    prefill->prompt = tokens[0];
    auto prefill_channel = prefill->channel;
    ASSERT_TRUE(scheduler.submit(std::move(prefill)));

    std::vector<Served> served;
    for (auto& channel : channels) served.push_back(collect(*channel));
    const Served prefilled = collect(*prefill_channel);

    // The oracle: generate() on a fresh State per prompt, one at a time.
    Evaluator evaluator(model, 2);
    for (size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_TRUE(served[i].error.empty()) << served[i].error;
        const int n = i == 1 ? 2 : 1;
        for (int c = 0; c < n; ++c) {
            State state(*model);
            evaluator.eval(state, tokens[i]);
            Sampler sampler(seeded(100 + i + static_cast<uint64_t>(c)));
            GenerateOptions g;
            g.max_tokens = max_tokens;
            std::vector<double> logprobs;
            g.on_sample = [&](std::span<const float> logits, int32_t token) {
                if (!tok.is_eog(token)) logprobs.push_back(token_logprob(logits, token, 0).logprob);
            };
            const GenerateResult expected = generate(evaluator, state, sampler, g);
            EXPECT_EQ(served[i].text[c], expected.text) << "prompt " << i << " choice " << c;
            EXPECT_EQ(served[i].logprobs[c], logprobs) << "prompt " << i << " choice " << c;  // exact doubles
            EXPECT_EQ(served[i].finish[c], expected.stop == StopReason::max_tokens ? "length" : "stop");
        }
        EXPECT_EQ(served[i].usage.prompt_tokens, static_cast<int64_t>(tokens[i].size()));
    }
    // Prompts 1 and 3 start with the shared text: its whole blocks came from the cache (prompt 0,
    // admitted first, computed them; the others waited for them, then found them cached).
    size_t common = 0;
    while (common < tokens[0].size() && common < tokens[3].size() && tokens[0][common] == tokens[3][common]) ++common;
    ASSERT_GE(common, 32u);
    EXPECT_GE(served[3].usage.cached_tokens, static_cast<int64_t>(common / 32 * 32)) << "prefix cache not used";
    EXPECT_GE(served[1].usage.cached_tokens, static_cast<int64_t>(common / 32 * 32)) << "prefix cache not used";

    // A prefill job hands back the state: the prompt's tokens and exactly its logits.
    ASSERT_TRUE(prefilled.error.empty()) << prefilled.error;
    ASSERT_TRUE(prefilled.state);
    State alone(*model);
    evaluator.eval(alone, tokens[0]);
    ASSERT_EQ(prefilled.state->n_tokens(), alone.n_tokens());
    ASSERT_EQ(prefilled.state->last_logits().size(), alone.last_logits().size());
    EXPECT_EQ(std::memcmp(prefilled.state->last_logits().data(), alone.last_logits().data(),
                          alone.last_logits().size() * sizeof(float)),
              0);
}

TEST(ServerScheduler, CancelledJobLeavesAndQueueIsBounded) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(test::default_model_path());
    Metrics metrics;
    SchedulerOptions options;
    options.threads = 1;
    options.parallel = 1;
    options.queue = 1;
    Scheduler scheduler(model, options, metrics);
    auto make = [&](int64_t max_tokens) {
        auto job = std::make_unique<GenerationJob>();
        job->prompt = model->tokenizer().encode("Once upon a time", AddSpecial::yes, ParseSpecial::yes);
        job->sampling = seeded(1);
        job->sampling.logit_bias = {{0, -100.0f}, {2, -100.0f}};  // SmolLM2's end tokens: run to max_tokens
        job->max_tokens = max_tokens;
        return job;
    };
    auto running = make(5000);
    auto running_channel = running->channel;
    ASSERT_TRUE(scheduler.submit(std::move(running)));
    std::vector<ChannelEvent> events;
    ASSERT_TRUE(running_channel->wait(events, std::chrono::seconds(60)));  // it is generating
    auto waiting = make(3);
    auto waiting_channel = waiting->channel;
    ASSERT_TRUE(scheduler.submit(std::move(waiting)));
    EXPECT_FALSE(scheduler.submit(make(3))) << "a full queue must refuse";
    running_channel->cancel();
    const Served second = collect(*waiting_channel);  // admitted once the cancelled job left its slot
    EXPECT_TRUE(second.error.empty()) << second.error;
    EXPECT_EQ(second.finish.at(0), "length");
    EXPECT_EQ(metrics.active_sequences.load(), 0);
}

}  // namespace
}  // namespace kvstash::server
