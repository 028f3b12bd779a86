// Prefix reuse of a hybrid (recurrent) model through `kvstash serve` (issue 33 item 11): the tiny
// Granite-hybrid fixture (tests/fixtures/recurrent/, made by tests/reference/make_recurrent_models.py),
// whose recurrent state exists only where a checkpoint was kept. The same prompt sent again reuses all
// but its last token (before: only up to the last 256-token interval checkpoint), and a next turn (the
// prompt, the reply, more) reuses the whole previous exchange, as an attention-only model does. The
// counts are the responses' usage.prompt_tokens_details.cached_tokens (/v1/completions) and
// tokens_cached (llama-server's /completion).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "e2e/server/http_client.h"

namespace kvstash::test {
namespace {

std::vector<int> tokenize(httplib::Client& client, const std::string& text) {
    const Reply r = post(client, "/tokenize", json{{"content", text}, {"add_special", true}});
    EXPECT_EQ(r.status, 200) << r.text;
    return r.body.value("tokens", std::vector<int>{});
}

int64_t cached_tokens(const Reply& r) { return r.body["usage"]["prompt_tokens_details"]["cached_tokens"]; }

TEST(ServerRecurrentReuse, RepeatAndNextTurnReuseTheWholePrefix) {
    ServerProcess server({"-m", fixture_path("recurrent/granitehybrid_f32.gguf"), "-t", "2", "--parallel", "2"});
    httplib::Client client = server.client();
    std::string prompt;
    for (int i = 0; prompt.size() < 900; ++i)
        prompt += "Line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog. ";
    const json first_body = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}};
    const Reply first = post(client, "/v1/completions", first_body);
    ASSERT_EQ(first.status, 200) << first.text;
    const int64_t prompt_tokens = first.body["usage"]["prompt_tokens"];
    ASSERT_GT(prompt_tokens, 600) << "past two 256-token interval checkpoints";
    EXPECT_EQ(cached_tokens(first), 0);

    // The same prompt again: everything but the last token (whose logits are needed) comes from the cache.
    const Reply again = post(client, "/v1/completions", first_body);
    ASSERT_EQ(again.status, 200) << again.text;
    EXPECT_EQ(cached_tokens(again), prompt_tokens - 1);
    EXPECT_EQ(again.body["choices"][0]["text"], first.body["choices"][0]["text"]);

    // The next turn: the prompt, the reply, and more, as token ids (a random model's reply need not
    // re-tokenize to the tokens it was generated as), through llama-server's /completion, which returns
    // the generated ids. The state after the last evaluated token (all but the reply's last) was cached
    // when the reply ended: everything up to there is reused.
    std::vector<int> tokens = tokenize(client, prompt);
    ASSERT_EQ(static_cast<int64_t>(tokens.size()), prompt_tokens);
    const Reply reply = post(client, "/completion",
                             json{{"prompt", tokens}, {"n_predict", 12}, {"temperature", 0}, {"return_tokens", true}});
    ASSERT_EQ(reply.status, 200) << reply.text;
    ASSERT_EQ(reply.body["stop_type"], "limit") << reply.text;
    EXPECT_EQ(reply.body["tokens_cached"], prompt_tokens - 1);
    const std::vector<int> generated = reply.body["tokens"];
    ASSERT_EQ(generated.size(), 12u);
    tokens.insert(tokens.end(), generated.begin(), generated.end());
    const std::vector<int> more = {tokens[5], tokens[6], tokens[7]};  // any ids of its vocabulary
    tokens.insert(tokens.end(), more.begin(), more.end());
    const Reply turn = post(client, "/completion", json{{"prompt", tokens}, {"n_predict", 4}, {"temperature", 0}});
    ASSERT_EQ(turn.status, 200) << turn.text;
    EXPECT_EQ(turn.body["tokens_cached"], prompt_tokens + 12 - 1) << "the whole previous exchange";
    EXPECT_EQ(turn.body["tokens_evaluated"], prompt_tokens + 12 + 3);
}

}  // namespace
}  // namespace kvstash::test
