// The mission's headline: continuing from a kept state is bit-for-bit the same as recomputing.
// For tiny models and the default model, with greedy decoding and with seeded sampling, all of these
// give bitwise-identical logits at every generated position and identical tokens:
//   (a) prefix + suffix in one pass;  (b) prefix, then suffix;  (c) prefix -> save -> load -> suffix
//   (in this process here; in a fresh process in tests/e2e/state_cli_test.cpp);  (d) fork -> suffix
//   while sibling forks generate other text;  (e) evaluate something else, truncate back, suffix.
// And: save -> load -> save writes a byte-identical file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kvstash/sampler.h"
#include "kvstash/state_file.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

struct Trace {
    std::vector<int32_t> tokens;
    std::vector<float> logits;  // the logits each token was sampled from, concatenated
};

Trace continue_trace(Evaluator& evaluator, State& state, const SamplerParams& params, int steps) {
    Trace trace;
    Sampler sampler(params);
    for (int i = 0; i < steps; ++i) {
        const auto logits = state.last_logits();
        trace.logits.insert(trace.logits.end(), logits.begin(), logits.end());
        const int32_t next = sampler.sample(logits, state.tokens());
        trace.tokens.push_back(next);
        evaluator.eval(state, std::span<const int32_t>(&next, 1));
    }
    return trace;
}

void expect_same(const Trace& want, const Trace& got, const char* what) {
    EXPECT_EQ(want.tokens, got.tokens) << what;
    ASSERT_EQ(want.logits.size(), got.logits.size()) << what;
    EXPECT_EQ(0, std::memcmp(want.logits.data(), got.logits.data(), want.logits.size() * sizeof(float)))
        << what << ": logits differ";
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

void check_model(const std::string& model_path, int64_t prefix_len, int64_t suffix_len, int steps,
                 KvType kv_type = KvType::f16) {
    auto model = Model::load(model_path);
    Evaluator evaluator(model, 2);
    const auto all = pseudo_random_tokens(prefix_len + suffix_len, model->n_vocab(), 99);
    const std::vector<int32_t> prefix(all.begin(), all.begin() + prefix_len);
    const std::vector<int32_t> suffix(all.begin() + prefix_len, all.end());
    const auto other = pseudo_random_tokens(23, model->n_vocab(), 7);
    const std::string dir = std::filesystem::temp_directory_path() / ("kvstash_exact_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);

    SamplerParams greedy;
    greedy.temperature = 0.0f;
    SamplerParams seeded;
    seeded.temperature = 0.9f;
    seeded.seed = 1234;
    for (const SamplerParams& params : {greedy, seeded}) {
        SCOPED_TRACE(params.temperature > 0 ? "seeded sampling" : "greedy");
        // (a) one pass
        const StateOptions options{.kv_type = kv_type};
        State full(*model, options);
        evaluator.eval(full, all);
        const Trace want = continue_trace(evaluator, full, params, steps);

        // (b) prefix, then suffix
        State base(*model, options);
        evaluator.eval(base, prefix);
        State b = base.fork();
        evaluator.eval(b, suffix);
        expect_same(want, continue_trace(evaluator, b, params, steps), "(b) prefix then suffix");

        // (c) save -> load -> continue; save -> load -> save is byte-identical
        const std::string file = dir + "/prefix.kvs";
        save_state(base, file);
        State loaded = load_state(*model, file);
        EXPECT_EQ(kv_type, loaded.kv_type());
        const StateFileInfo info = inspect_state_file(file, Checksums::verify);
        EXPECT_EQ(kv_type, info.kv_type);
        EXPECT_FALSE(info.lossy_kv);
        save_state(loaded, dir + "/again.kvs");
        EXPECT_EQ(read_bytes(file), read_bytes(dir + "/again.kvs")) << "save -> load -> save changed the file";
        evaluator.eval(loaded, suffix);
        expect_same(want, continue_trace(evaluator, loaded, params, steps), "(c) save, load, continue");

        // (d) forks: siblings generate other text in between
        State sibling1 = base.fork();
        State mine = base.fork();
        State sibling2 = base.fork();
        evaluator.eval(sibling1, other);
        evaluator.eval(mine, suffix);
        evaluator.eval(sibling2, std::span<const int32_t>(other.data(), 5));
        continue_trace(evaluator, sibling1, seeded, 3);
        const Trace forked = continue_trace(evaluator, mine, params, steps);
        continue_trace(evaluator, sibling2, greedy, 3);
        expect_same(want, forked, "(d) fork among siblings");
        // ... and the parent is undisturbed by its children
        State parent_check = base.fork();
        evaluator.eval(parent_check, suffix);
        expect_same(want, continue_trace(evaluator, parent_check, params, steps), "(d) parent after forks");

        // (e) truncate back, then continue
        State e = base.fork();
        evaluator.eval(e, other);
        e.truncate(prefix_len);
        evaluator.eval(e, suffix);
        expect_same(want, continue_trace(evaluator, e, params, steps), "(e) truncate then continue");
    }
    std::filesystem::remove_all(dir);
}

TEST(StateExactness, TinyModels) {
    for (const auto& path : fixture_files("tiny", ".gguf")) {
        SCOPED_TRACE(path);
        check_model(path, 45, 7, 12);  // the prefix ends inside a 32-token KV block
    }
}

// A q8_0 cache (its rows quantized once, when written): saved and restored, forked, truncated, it continues
// bitwise like the uninterrupted q8_0 run. Every tiny model whose head size allows q8_0 (a multiple of 32).
TEST(StateExactness, TinyModelsQ8_0Cache) {
    int checked = 0;
    for (const auto& path : fixture_files("tiny", ".gguf")) {
        if (Model::load(path)->info().head_dim % 32 != 0) continue;
        SCOPED_TRACE(path);
        check_model(path, 45, 7, 12, KvType::q8_0);
        ++checked;
    }
    EXPECT_GE(checked, 2);
}

TEST(StateExactness, SmolLM2Q8_0Cache) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    check_model(default_model_path(), 77, 9, 24, KvType::q8_0);
}

TEST(StateExactness, SmolLM2) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    check_model(default_model_path(), 77, 9, 24);
}

}  // namespace
}  // namespace kvstash::test
