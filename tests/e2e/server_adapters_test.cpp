// The server's adapters (docs/adapters.md): requests choose an adapter set by name ("adapter": "NAME"),
// an unknown name is a 400 naming it, and requests under different sets batched together get exactly
// what each gets served alone (the same text and logprobs, so the same logits bit for bit); each set's
// prompts are cached apart.
#include <gtest/gtest.h>

#include "e2e/server/channel_collect.h"
#include "kvstash/adapter.h"
#include "kvstash/tokenizer.h"
#include "server/api_error.h"
#include "server/request_job.h"
#include "server/scheduler.h"
#include "support/paths.h"

namespace kvstash::server {
namespace {

SamplerParams seeded(uint64_t seed) {
    SamplerParams p;
    p.temperature = 0.9f;
    p.seed = seed;
    return p;
}

struct AdapterServer {
    std::shared_ptr<const Model> model = Model::load(test::fixture_path("adapters/base.gguf"));
    std::map<std::string, std::shared_ptr<const AdapterSet>> adapters = {
        {"style", AdapterSet::load(*model, std::vector<AdapterFile>{{AdapterKind::lora,
                                                                     test::fixture_path("adapters/lora.gguf"), 1.0f}})},
        {"mood", AdapterSet::load(*model, std::vector<AdapterFile>{{AdapterKind::control_vector,
                                                                    test::fixture_path("adapters/cvec.gguf"), 0.8f}})}};

    SchedulerOptions options(int parallel) const {
        SchedulerOptions o;
        o.threads = 2;
        o.parallel = parallel;
        o.n_ctx = 256;
        o.step_tokens = 5;  // odd chunks: prompts and decodes of different requests share steps
        o.adapters = adapters;
        return o;
    }
    std::unique_ptr<GenerationJob> job(const std::vector<int32_t>& prompt, const std::string& adapter,
                                       uint64_t seed) const {
        auto j = std::make_unique<GenerationJob>();
        j->prompt = prompt;
        j->sampling = seeded(seed);
        j->max_tokens = 10;
        j->top_logprobs = 0;
        j->stop = {};
        if (!adapter.empty()) j->adapters = adapters.at(adapter);
        return j;
    }
};

TEST(ServerAdapters, BatchedRequestsUnderDifferentAdaptersEqualEachAlone) {
    const AdapterServer s;
    const std::vector<int32_t> prompt = s.model->tokenizer().encode("She had been forced into prudence in her youth",
                                                                    AddSpecial::yes, ParseSpecial::yes);
    const std::vector<std::string> names = {"", "style", "mood", "style", ""};

    // Alone: one scheduler per request, nothing else running.
    std::vector<Served> alone;
    for (size_t i = 0; i < names.size(); ++i) {
        Metrics metrics;
        Scheduler scheduler(s.model, s.options(1), metrics);
        auto j = s.job(prompt, names[i], 10);  // one seed: only the adapter differs
        auto channel = j->channel;
        ASSERT_TRUE(scheduler.submit(std::move(j)));
        alone.push_back(collect(*channel));
        ASSERT_TRUE(alone.back().error.empty()) << alone.back().error;
    }
    // Together: all at once, batched in the same steps.
    Metrics metrics;
    Scheduler scheduler(s.model, s.options(static_cast<int>(names.size())), metrics);
    std::vector<std::shared_ptr<RequestChannel>> channels;
    for (size_t i = 0; i < names.size(); ++i) {
        auto j = s.job(prompt, names[i], 10);  // one seed: only the adapter differs
        channels.push_back(j->channel);
        ASSERT_TRUE(scheduler.submit(std::move(j)));
    }
    for (size_t i = 0; i < names.size(); ++i) {
        const Served together = collect(*channels[i]);
        ASSERT_TRUE(together.error.empty()) << together.error;
        EXPECT_EQ(together.text, alone[i].text) << "request " << i << " (" << names[i] << ")";
        EXPECT_EQ(together.logprobs, alone[i].logprobs) << "request " << i << " (" << names[i] << ")";
    }
    // The same seed under another adapter samples from other logits; under the same one, the same.
    EXPECT_NE(alone[0].logprobs, alone[1].logprobs);
    EXPECT_NE(alone[0].logprobs, alone[2].logprobs);
    EXPECT_EQ(alone[1].logprobs, alone[3].logprobs);
}

TEST(ServerAdapters, UnknownAdapterNameIsA400NamingIt) {
    const AdapterServer s;
    ServerContext ctx;
    ctx.model = s.model;
    ctx.options.parallel = 2;
    ctx.options.adapters = s.adapters;
    ctx.states = std::make_unique<StateStore>(*s.model, "");
    ctx.scheduler = std::make_unique<Scheduler>(s.model, s.options(2), ctx.metrics);
    const auto build = [&](const std::string& body) {
        return build_completion_job(
            parse_completion_request(parse_json_body(body), Endpoint::text, request_limits(ctx)), ctx);
    };
    EXPECT_EQ(build(R"({"prompt": "Anne", "adapter": "style"})")->adapters, s.adapters.at("style"));
    EXPECT_EQ(build(R"({"prompt": "Anne"})")->adapters, nullptr);
    try {
        build(R"({"prompt": "Anne", "adapter": "sad"})");
        FAIL() << "an unknown adapter was accepted";
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_NE(std::string(e.what()).find("'sad'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("mood, style"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace kvstash::server
