// Recurrent and hybrid models (tests/fixtures/recurrent/) through the interfaces built for Llama:
// the server's scheduler (continuous batching, odd prompt chunks, n > 1 choices forked) answers every
// request exactly as generate() alone; a chat session's undo restores a checkpoint and re-evaluates
// nothing; `kvstash perplexity` runs and agrees with the library's own log-probabilities.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "e2e/server/channel_collect.h"
#include "kvstash/chat.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/session.h"
#include "kvstash/tokenizer.h"
#include "server/scheduler.h"
#include "support/eval_helpers.h"
#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

const char* const kModels[] = {"recurrent/granitehybrid_f32.gguf", "recurrent/mamba2_q8_0.gguf",
                               "recurrent/mamba1_f32.gguf"};

SamplerParams seeded(uint64_t seed) {
    SamplerParams p;
    p.temperature = 0.9f;
    p.top_k = 40;
    p.seed = seed;
    return p;
}

TEST(RecurrentServing, SchedulerBatchedChunkedEqualsGenerateAlone) {
    for (const char* name : kModels) {
        SCOPED_TRACE(name);
        auto model = Model::load(fixture_path(name));
        const Tokenizer& tok = model->tokenizer();
        const auto shared = pseudo_random_tokens(70, model->n_vocab(), 21);
        std::vector<std::vector<int32_t>> prompts;
        for (uint64_t i = 0; i < 5; ++i) {
            std::vector<int32_t> p = i % 2 == 0 ? shared : std::vector<int32_t>{};
            const auto own = pseudo_random_tokens(5 + 9 * static_cast<int64_t>(i), model->n_vocab(), 30 + i);
            p.insert(p.end(), own.begin(), own.end());
            prompts.push_back(p);
        }
        server::Metrics metrics;
        server::SchedulerOptions options;
        options.threads = 2;
        options.parallel = 4;
        options.step_tokens = 7;
        options.n_ctx = 512;
        server::Scheduler scheduler(model, options, metrics);
        std::vector<std::shared_ptr<server::RequestChannel>> channels;
        for (size_t i = 0; i < prompts.size(); ++i) {
            auto job = std::make_unique<server::GenerationJob>();
            job->prompt = prompts[i];
            job->sampling = seeded(7 + i);
            job->max_tokens = 10;
            job->n = i == 2 ? 2 : 1;
            job->top_logprobs = 0;  // logprobs of the sampled tokens: equal logprobs = equal logits
            channels.push_back(job->channel);
            ASSERT_TRUE(scheduler.submit(std::move(job)));
        }
        Evaluator evaluator(model, 2);
        for (size_t i = 0; i < prompts.size(); ++i) {
            server::Served served = server::collect(*channels[i]);
            ASSERT_TRUE(served.error.empty()) << served.error;
            for (int c = 0; c < (i == 2 ? 2 : 1); ++c) {
                State state(*model, StateOptions{KvType::f16, 512});
                evaluator.eval(state, prompts[i]);
                Sampler sampler(seeded(7 + i + static_cast<uint64_t>(c)));
                GenerateOptions g;
                g.max_tokens = 10;
                std::vector<double> logprobs;
                g.on_sample = [&](std::span<const float> logits, int32_t token) {
                    if (!tok.is_eog(token)) logprobs.push_back(server::token_logprob(logits, token, 0).logprob);
                };
                const GenerateResult expected = generate(evaluator, state, sampler, g);
                EXPECT_EQ(served.text[c], expected.text) << "prompt " << i << " choice " << c;
                EXPECT_EQ(served.logprobs[c], logprobs) << "prompt " << i << " choice " << c;
            }
        }
    }
}

TEST(RecurrentServing, ChatUndoRestoresACheckpointAndRepeatsTheTurnExactly) {
    for (const char* name : kModels) {
        SCOPED_TRACE(name);
        auto model = Model::load(fixture_path(name));
        Evaluator evaluator(model, 2);
        Session chat(evaluator, ChatTemplate::named("chatml"), "You are terse.");
        Sampler sampler(seeded(3));
        GenerateOptions g;
        g.max_tokens = 12;
        chat.reply("Name a fruit.", sampler, g);
        const std::vector<int32_t> after_first(chat.state().tokens().begin(), chat.state().tokens().end());
        Sampler second_sampler(seeded(4));
        const GenerateResult second = chat.reply("And a colour?", second_sampler, g);
        const int64_t second_computed = chat.last_computed();
        // Appended: the second prompt extended the State's tokens (else the rendering re-tokenized the
        // random model's reply differently and the exchange started where the two agree).
        const bool appended = chat.last_turn().appended;
        ASSERT_TRUE(chat.undo());
        if (appended) {
            EXPECT_EQ(std::vector<int32_t>(chat.state().tokens().begin(), chat.state().tokens().end()), after_first);
        }
        EXPECT_EQ(chat.state().n_pending(), 0) << "the turn's start was checkpointed: undo re-evaluates nothing";
        Sampler again(seeded(4));
        EXPECT_EQ(chat.reply("And a colour?", again, g).tokens, second.tokens);
        EXPECT_EQ(chat.last_computed(), second_computed);
    }
}

TEST(RecurrentServing, PerplexityCliAgreesWithTheLibrary) {
    const std::string model_path = fixture_path("recurrent/granitehybrid_f32.gguf");
    auto model = Model::load(model_path);
    const std::string text =
        "Sir Walter Elliot, of Kellynch Hall, in Somersetshire, was a man who, for his own amusement, never "
        "took up any book but the Baronetage; there he found occupation for an idle hour, and consolation in a "
        "distressed one.";
    const std::string file = ::testing::TempDir() + "recurrent_ppl.txt";
    std::ofstream(file) << text;
    const auto r = run_cli({"perplexity", "-m", model_path, "-f", file, "--ctx", "32", "-t", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto at = r.out.rfind("ppl = ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const double cli = std::stod(r.out.substr(at + 6));
    // The same quantity from the library's logits (checked against transformers in
    // tests/parity/recurrent_models_test.cpp), log-softmax in double: chunks of 32 tokens from a fresh
    // state, each scored on positions 16..31.
    const auto tokens = model->tokenizer().encode(text, AddSpecial::yes, ParseSpecial::no);
    ASSERT_GE(tokens.size(), 32u);
    Evaluator evaluator(model, 2);
    const int64_t V = model->n_vocab();
    double nll = 0.0;
    int64_t scored = 0;
    std::vector<float> logits;
    for (size_t c = 0; c + 32 <= tokens.size(); c += 32) {
        State state(*model, StateOptions{KvType::f16, 32});
        evaluator.eval(state, std::span(tokens).subspan(c, 32), &logits);
        for (int64_t j = 16; j < 32; ++j) {
            const float* row = logits.data() + (j - 1) * V;
            double max = row[0], sum = 0.0;
            for (int64_t v = 1; v < V; ++v) max = std::max<double>(max, row[v]);
            for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - max);
            nll -= row[tokens[c + static_cast<size_t>(j)]] - max - std::log(sum);
            ++scored;
        }
    }
    const double library = std::exp(nll / static_cast<double>(scored));
    std::printf("granitehybrid_f32 perplexity: CLI %.4f, library %.6f\n", cli, library);
    EXPECT_NEAR(cli, library, 1e-4 * library + 5e-5);
}

}  // namespace
}  // namespace kvstash::test
