// The invariant for models with recurrent layers (Mamba-1, Mamba-2, granitehybrid): the logits at
// position i are the same bits however the tokens arrived — one call, chunks, one at a time, several
// threads, batched with other sequences, after a fork, after a truncate that restores a checkpoint and
// evaluates the rest again. The recurrent state is advanced token by token in one fixed order
// (backends/cpu/ssm/ssm.h), and checkpoints are taken between tokens, so none of these may change a bit.
// Models: tests/fixtures/recurrent/*.gguf (tests/reference/make_recurrent_models.py).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "kvstash/state_file.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

std::vector<std::string> recurrent_models() {
    std::vector<std::string> out;
    for (const std::string& json : fixture_files("recurrent", ".json")) {
        out.push_back(fixture_path("recurrent/" + load_json(json).at("model").get<std::string>()));
    }
    return out;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// Logits of every token, evaluated in chunks of the given sizes (cycled) with a checkpoint interval.
std::vector<float> chunked(Evaluator& evaluator, const Model& model, const std::vector<int32_t>& tokens,
                           const std::vector<int64_t>& chunks, int64_t checkpoint_interval) {
    StateOptions options;
    options.kv_type = KvType::f32;
    options.checkpoint_interval = checkpoint_interval;
    State state(model, options);
    std::vector<float> all, part;
    size_t done = 0;
    for (size_t k = 0; done < tokens.size(); ++k) {
        const size_t size = std::min<size_t>(static_cast<size_t>(chunks[k % chunks.size()]), tokens.size() - done);
        evaluator.eval(state, std::span(tokens).subspan(done, size), &part);
        all.insert(all.end(), part.begin(), part.end());
        done += size;
    }
    return all;
}

class RecurrentExactness : public ::testing::Test {
protected:
    void SetUp() override {
        paths_ = recurrent_models();
        ASSERT_GE(paths_.size(), 3u) << "expected the recurrent fixtures of tests/reference/make_recurrent_models.py";
    }
    std::vector<std::string> paths_;
};

TEST_F(RecurrentExactness, ChunkingThreadsAndCheckpointsChangeNoBit) {
    for (const std::string& path : paths_) {
        SCOPED_TRACE(path);
        auto model = Model::load(path);
        ASSERT_GT(model->info().n_recurrent_layers, 0);
        const auto tokens = pseudo_random_tokens(150, model->n_vocab(), 5);
        Evaluator one_thread(model, 1), two_threads(model, 2);
        const auto want = chunked(one_thread, *model, tokens, {150}, 0);
        ASSERT_EQ(want.size(), tokens.size() * static_cast<size_t>(model->n_vocab()));
        for (const auto& [chunks, interval] : std::vector<std::pair<std::vector<int64_t>, int64_t>>{
                 {{1}, 0}, {{3, 5, 7}, 0}, {{150}, 4}, {{13, 64, 2}, 5}, {{40}, 1}}) {
            EXPECT_TRUE(
                same_bits(want.data(), chunked(two_threads, *model, tokens, chunks, interval).data(), want.size()))
                << "chunks starting " << chunks[0] << ", checkpoint interval " << interval;
        }
    }
}

TEST_F(RecurrentExactness, BatchedWithOtherSequencesEqualsAlone) {
    for (const std::string& path : paths_) {
        SCOPED_TRACE(path);
        auto model = Model::load(path);
        Evaluator evaluator(model, 2);
        const auto a = pseudo_random_tokens(70, model->n_vocab(), 1);
        const auto b = pseudo_random_tokens(33, model->n_vocab(), 2);
        const auto a_alone = chunked(evaluator, *model, a, {70}, 16);
        const auto b_alone = chunked(evaluator, *model, b, {33}, 16);
        StateOptions options;
        options.kv_type = KvType::f32;
        options.checkpoint_interval = 16;
        State sa(*model, options), sb(*model, options);
        std::vector<float> la, lb;
        const EvalRequest batch[] = {{&sa, a, &la}, {&sb, b, &lb}};
        evaluator.eval_batch(batch);
        EXPECT_TRUE(same_bits(a_alone.data(), la.data(), la.size()));
        EXPECT_TRUE(same_bits(b_alone.data(), lb.data(), lb.size()));
        EXPECT_EQ(sa.checkpoint_positions(), (std::vector<int64_t>{16, 32, 48, 64}));
    }
}

TEST_F(RecurrentExactness, ForksContinueIndependentlyAndBitwise) {
    for (const std::string& path : paths_) {
        SCOPED_TRACE(path);
        auto model = Model::load(path);
        Evaluator evaluator(model, 2);
        const auto all = pseudo_random_tokens(90, model->n_vocab(), 3);
        const auto other = pseudo_random_tokens(40, model->n_vocab(), 4);
        const auto want = chunked(evaluator, *model, all, {90}, 0);
        StateOptions options;
        options.kv_type = KvType::f32;
        State trunk(*model, options);
        evaluator.eval(trunk, std::span(all).first(50));
        State branch = trunk.fork();
        // The sibling writes into its (shared, copied-on-write) recurrent state first.
        std::vector<float> got;
        evaluator.eval(trunk, other);
        evaluator.eval(branch, std::span(all).subspan(50), &got);
        EXPECT_TRUE(same_bits(want.data() + 50 * model->n_vocab(), got.data(), got.size()));
    }
}

TEST_F(RecurrentExactness, TruncateRestoresACheckpointAndReplaysBitwise) {
    for (const std::string& path : paths_) {
        SCOPED_TRACE(path);
        auto model = Model::load(path);
        const int64_t V = model->n_vocab();
        Evaluator evaluator(model, 2);
        const auto all = pseudo_random_tokens(60, V, 8);
        const auto detour = pseudo_random_tokens(25, V, 9);
        const auto want = chunked(evaluator, *model, all, {60}, 0);
        StateOptions options;
        options.kv_type = KvType::f32;
        options.checkpoint_interval = 8;
        State state(*model, options);
        evaluator.eval(state, std::span(all).first(40));
        evaluator.eval(state, detour);
        EXPECT_EQ(state.checkpoint_positions(), (std::vector<int64_t>{8, 16, 24, 32, 40, 48, 56, 64}));
        // Back to 29: checkpoint 24 restored, tokens 24..28 wait to be evaluated again.
        state.truncate(29);
        EXPECT_EQ(state.n_tokens(), 29);
        EXPECT_EQ(state.n_pending(), 5);
        EXPECT_EQ(state.checkpoint_positions(), (std::vector<int64_t>{8, 16, 24}));
        EXPECT_TRUE(state.last_logits().empty());
        std::vector<float> got;
        evaluator.eval(state, std::span(all).subspan(29), &got);
        EXPECT_EQ(state.n_pending(), 0);
        ASSERT_EQ(got.size(), static_cast<size_t>(31 * V));
        EXPECT_TRUE(same_bits(want.data() + 29 * V, got.data(), got.size()));
        // Before the first checkpoint: everything from the zero state again.
        state.truncate(5);
        EXPECT_EQ(state.n_pending(), 5);
        evaluator.eval(state, std::span(all).subspan(5, 10), &got);
        EXPECT_TRUE(same_bits(want.data() + 5 * V, got.data(), got.size()));
        // A truncate inside the tokens still waiting only shortens them.
        state.truncate(15);
        evaluator.eval(state, std::span(all).subspan(15, 1));
        state.truncate(12);
        state.truncate(10);
        EXPECT_EQ(state.n_pending(), 2);
        evaluator.eval(state, std::span(all).subspan(10, 5), &got);
        EXPECT_TRUE(same_bits(want.data() + 10 * V, got.data(), got.size()));
    }
}

TEST_F(RecurrentExactness, ExplicitCheckpointMakesUndoFree) {
    auto model = Model::load(paths_.front());
    Evaluator evaluator(model, 2);
    const auto all = pseudo_random_tokens(30, model->n_vocab(), 11);
    State state(*model);  // default interval: no automatic checkpoint in 30 tokens
    evaluator.eval(state, std::span(all).first(17));
    state.checkpoint();
    evaluator.eval(state, std::span(all).subspan(17));
    EXPECT_EQ(state.checkpoint_positions(), (std::vector<int64_t>{17}));
    state.truncate(17);
    EXPECT_EQ(state.n_pending(), 0);
}

TEST_F(RecurrentExactness, CheckpointMemoryIsBounded) {
    auto model = Model::load(paths_.front());
    Evaluator evaluator(model, 2);
    StateOptions options;
    options.checkpoint_interval = 4;
    options.checkpoint_memory = 3 * model->info().recurrent_state_bytes;
    State state(*model, options);
    const auto all = pseudo_random_tokens(64, model->n_vocab(), 12);
    for (size_t i = 0; i < all.size(); i += 8) evaluator.eval(state, std::span(all).subspan(i, 8));
    const auto positions = state.checkpoint_positions();
    ASSERT_EQ(positions.size(), 3u);
    EXPECT_EQ(positions.back(), 64);  // the newest is kept
    EXPECT_EQ(state.recurrent_bytes(), 4 * model->info().recurrent_state_bytes);
}

// State files hold the recurrent state (format version 2); recurrent_state_file_test.cpp tests them.
TEST_F(RecurrentExactness, StateFilesSaveRecurrentStates) {
    auto model = Model::load(paths_.front());
    Evaluator evaluator(model, 1);
    State state(*model);
    const auto tokens = pseudo_random_tokens(9, model->n_vocab(), 13);
    evaluator.eval(state, std::span(tokens).first(5));
    const std::string path = ::testing::TempDir() + "recurrent_saved.kvstate";
    save_state(state, path);
    State loaded = load_state(*model, path);
    std::filesystem::remove(path);
    EXPECT_EQ(loaded.n_tokens(), 5);
    std::vector<float> want, got;
    evaluator.eval(state, std::span(tokens).subspan(5), &want);
    evaluator.eval(loaded, std::span(tokens).subspan(5), &got);
    ASSERT_EQ(want.size(), got.size());
    EXPECT_TRUE(same_bits(want.data(), got.data(), want.size()));
}

}  // namespace
}  // namespace kvstash::test
