// The generation loop with a greedy Sampler against transformers' greedy continuations
// (tests/fixtures/smollm2/greedy.json, made by tests/reference/make_smollm2_fixtures.py: a manual
// argmax loop in fp32, lowest id on ties, 40 tokens, EOS not stopping). This checks, against an
// oracle outside kvstash, the sampler's greedy rule as driven by generate(), the text assembled from
// token pieces (compared with transformers' own decode of the same ids) and where EOG stops.
// Token agreement uses the bar of smollm2_test.cpp's raw-argmax test (>= 32 of 40: Q4_1 logits with an
// f16 KV cache may flip a near-tie); the text and EOG checks apply where the ids agree.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/sampler.h"
#include "kvstash/state.h"
#include "kvstash/tokenizer.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

using Ids = std::vector<int32_t>;

GenerateResult greedy_generate(const std::shared_ptr<const Model>& model, Evaluator& evaluator, const Ids& prompt,
                               int64_t max_tokens, bool stop_at_eog, std::string& streamed) {
    State state(*model);
    evaluator.eval(state, prompt);
    SamplerParams params;
    params.temperature = 0.0f;
    Sampler sampler(params);
    GenerateOptions options;
    options.max_tokens = max_tokens;
    options.stop_at_end_of_generation = stop_at_eog;
    streamed.clear();
    return generate(evaluator, state, sampler, options, [&streamed](int32_t, std::string_view text) {
        streamed += text;
        return true;
    });
}

TEST(SamplerParity, GreedyGenerationMatchesTransformers) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto j = load_json(fixture_path("smollm2/greedy.json"));
    auto model = Model::load(default_model_path());
    const Tokenizer& tok = model->tokenizer();
    Evaluator evaluator(model, 2);
    int checked_eog = 0;
    for (const auto& c : j.at("cases")) {
        const auto name = c.at("name").get<std::string>();
        SCOPED_TRACE(name);
        const auto prompt = c.at("prompt_ids").get<Ids>();
        const auto expected = c.at("generated_ids").get<Ids>();
        const auto expected_text = c.at("generated_text").get<std::string>();

        std::string streamed;
        const auto n = static_cast<int64_t>(expected.size());
        const auto all = greedy_generate(model, evaluator, prompt, n, /*stop_at_eog=*/false, streamed);
        ASSERT_EQ(all.tokens.size(), expected.size());
        size_t same = 0;
        while (same < expected.size() && all.tokens[same] == expected[same]) ++same;
        std::printf("%-10s generate(greedy): %zu/%zu tokens identical to transformers\n", name.c_str(), same,
                    expected.size());
        EXPECT_GE(same, 32u);
        EXPECT_EQ(streamed, all.text);

        // Transformers' text (special tokens written out) without the EOG tokens' text.
        std::string without_eog = expected_text;
        for (int32_t id : expected) {
            if (!tok.is_eog(id)) continue;
            const std::string piece = tok.token_piece(id);
            for (size_t at = without_eog.find(piece); at != std::string::npos; at = without_eog.find(piece)) {
                without_eog.erase(at, piece.size());
            }
        }
        if (same == expected.size()) {
            EXPECT_EQ(all.text, without_eog);
        }

        // Stopping at the first EOG of the reference, where the ids agree that far.
        size_t first_eog = 0;
        while (first_eog < expected.size() && !tok.is_eog(expected[first_eog])) ++first_eog;
        if (first_eog == expected.size() || first_eog >= same) continue;
        const auto stopped = greedy_generate(model, evaluator, prompt, n, /*stop_at_eog=*/true, streamed);
        EXPECT_EQ(stopped.stop, StopReason::end_of_generation);
        EXPECT_EQ(stopped.tokens, Ids(expected.begin(), expected.begin() + static_cast<std::ptrdiff_t>(first_eog) + 1));
        EXPECT_EQ(stopped.text, expected_text.substr(0, expected_text.find(tok.token_piece(expected[first_eog]))));
        EXPECT_EQ(streamed, stopped.text);
        ++checked_eog;
    }
    EXPECT_GE(checked_eog, 1) << "the fixture's EOG cases (plain, question) no longer exercise the EOG stop";
}

}  // namespace
}  // namespace kvstash::test
