// Evaluator::eval_batch (continuous batching) against eval() on each sequence alone, bitwise (memcmp):
// last logits, all_logits and the KV cache (compared byte for byte and through later decode logits),
// on every tiny model and on SmolLM2; prompt lengths cross the 32-token KV block and the 128-row
// micro-batch; sequences join and leave a decode loop; forked states share blocks in one batch; every
// kind of bad request throws and leaves every State as it was; 1 and 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_block_staging.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "state/state_access.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

constexpr int64_t kCtx = 512;

std::string first_difference(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return "sizes differ: " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            return "first difference at element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " +
                   std::to_string(b[i]);
        }
    }
    return "";
}

#define EXPECT_BITWISE(a, b, what) EXPECT_EQ(first_difference((a), (b)), "") << (what)

std::vector<float> to_vector(std::span<const float> s) { return {s.begin(), s.end()}; }

// The KV bytes of positions [0, n_tokens), every layer, K then V per (position, layer); rows past
// n_tokens in the last block are unspecified and left out.
std::vector<uint8_t> kv_bytes(const State& state) {
    const KvCache& kv = StateAccess::kv(state);
    std::vector<uint8_t> out;
    const uint64_t rb = kv.row_bytes();
    KvBlockStaging staging;
    for (int64_t pos = 0; pos < kv.n_tokens(); ++pos) {
        for (int64_t layer = 0; layer < kv.n_layer(); ++layer) {
            const uint64_t offset =
                (static_cast<uint64_t>(layer) * kv_block_tokens + static_cast<uint64_t>(pos % kv_block_tokens)) * rb;
            const KvBlock& block = kv.block(pos / kv_block_tokens);
            const uint8_t* k = staging.read(block, KvHalf::keys).data() + offset;
            const uint8_t* v = staging.read(block, KvHalf::values).data() + offset;
            out.insert(out.end(), k, k + rb);
            out.insert(out.end(), v, v + rb);
        }
    }
    return out;
}

// Everything an eval may change in a State.
struct Snapshot {
    std::vector<int32_t> tokens;
    std::vector<float> last_logits;
    int64_t kv_tokens = 0;
    std::vector<uint8_t> kv;
};

Snapshot snapshot(const State& state) {
    return {{state.tokens().begin(), state.tokens().end()},
            to_vector(state.last_logits()),
            StateAccess::kv(state).n_tokens(),
            kv_bytes(state)};
}

void expect_same_state(const Snapshot& a, const Snapshot& b, const std::string& what) {
    EXPECT_EQ(a.tokens, b.tokens) << what;
    EXPECT_BITWISE(a.last_logits, b.last_logits, what + ": last logits");
    EXPECT_EQ(a.kv_tokens, b.kv_tokens) << what;
    EXPECT_TRUE(a.kv == b.kv) << what << ": KV bytes differ";
}

// Logits of a few more tokens after the state (checks its KV through the model, not only its bytes).
std::vector<float> probe(Evaluator& evaluator, State& state, int64_t n_vocab) {
    State copy = state.fork();
    std::vector<float> logits;
    evaluator.eval(copy, pseudo_random_tokens(3, n_vocab, 99), &logits);
    return logits;
}

int32_t argmax(std::span<const float> logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// (1) Prompts of many lengths in one eval_batch vs each alone; half the requests ask for all_logits
// (alternating, both parities), on empty states and on states that already hold a prefix.
void check_prompts(const std::string& path, int n_threads) {
    auto model = Model::load(path);
    const int64_t n_vocab = model->n_vocab();
    const std::vector<int64_t> lengths = {1, 5, 31, 33, 100, 130};
    Evaluator alone(model, 1);
    Evaluator batched(model, n_threads);
    for (int64_t prefix : {int64_t{0}, int64_t{7}}) {
        for (int parity : {0, 1}) {
            SCOPED_TRACE("prefix " + std::to_string(prefix) + ", all_logits parity " + std::to_string(parity) + ", " +
                         std::to_string(n_threads) + " threads");
            std::vector<std::vector<int32_t>> prompts;
            std::vector<State> ref_states, states;
            std::vector<std::vector<float>> ref_all(lengths.size()), all(lengths.size());
            std::vector<EvalRequest> requests;
            for (size_t i = 0; i < lengths.size(); ++i) {
                prompts.push_back(pseudo_random_tokens(lengths[i], n_vocab, 1000 + i));
                ref_states.emplace_back(*model, StateOptions{KvType::f16, kCtx});
                states.emplace_back(*model, StateOptions{KvType::f16, kCtx});
                if (prefix > 0) {
                    const auto head = pseudo_random_tokens(prefix, n_vocab, 7 + i);
                    alone.eval(ref_states.back(), head);
                    alone.eval(states.back(), head);
                }
            }
            for (size_t i = 0; i < lengths.size(); ++i) {
                const bool want_all = static_cast<int>(i % 2) == parity;
                alone.eval(ref_states[i], prompts[i], want_all ? &ref_all[i] : nullptr);
                requests.push_back(EvalRequest{&states[i], prompts[i], want_all ? &all[i] : nullptr});
            }
            batched.eval_batch(requests);
            for (size_t i = 0; i < lengths.size(); ++i) {
                const std::string what = "prompt of " + std::to_string(lengths[i]) + " tokens";
                expect_same_state(snapshot(ref_states[i]), snapshot(states[i]), what);
                EXPECT_BITWISE(ref_all[i], all[i], what + ": all_logits");
                EXPECT_BITWISE(probe(alone, ref_states[i], n_vocab), probe(alone, states[i], n_vocab),
                               what + ": decode after it");
            }
        }
    }
}

// (2) Continuous batching: 8 sequences join (their prompt evaluated in the same batch as the others'
// decode tokens), decode one greedy token per step, sometimes sit a step out (an empty request), and
// leave; 20 steps. Each sequence's logits after every one of its steps vs the sequence decoded alone.
void check_decode_loop(const std::string& path, int n_threads) {
    auto model = Model::load(path);
    const int64_t n_vocab = model->n_vocab();
    struct Sequence {
        std::vector<int32_t> prompt;
        int join = 0, leave = 0;                 // active in steps [join, leave)
        std::vector<std::vector<float>> logits;  // after each evaluated step
    };
    constexpr int kSteps = 20;
    std::vector<Sequence> seqs(8);
    for (size_t j = 0; j < seqs.size(); ++j) {
        const auto jj = static_cast<int>(j);
        seqs[j].prompt = pseudo_random_tokens(1 + 9 * jj, n_vocab, 500 + j);  // 1 .. 64 tokens
        seqs[j].join = (jj * 3) % 7;
        seqs[j].leave = std::min(kSteps, seqs[j].join + 6 + 2 * jj);
    }
    const auto sits_out = [](size_t j, int step) { return j == 3 && step % 3 == 2; };

    Evaluator batched(model, n_threads);
    std::vector<State> states;
    for (size_t j = 0; j < seqs.size(); ++j) states.emplace_back(*model, StateOptions{KvType::f16, kCtx});
    std::vector<std::vector<int32_t>> step_tokens(seqs.size());
    for (int step = 0; step < kSteps; ++step) {
        std::vector<EvalRequest> requests;
        std::vector<size_t> evaluated;
        for (size_t j = 0; j < seqs.size(); ++j) {
            if (step < seqs[j].join || step >= seqs[j].leave) continue;
            if (step == seqs[j].join) {
                step_tokens[j] = seqs[j].prompt;
            } else if (sits_out(j, step)) {
                step_tokens[j].clear();
            } else {
                step_tokens[j] = {argmax(states[j].last_logits())};
            }
            requests.push_back(EvalRequest{&states[j], step_tokens[j], nullptr});
            if (!step_tokens[j].empty()) evaluated.push_back(j);
        }
        batched.eval_batch(requests);
        for (size_t j : evaluated) seqs[j].logits.push_back(to_vector(states[j].last_logits()));
    }

    Evaluator alone(model, 1);
    for (size_t j = 0; j < seqs.size(); ++j) {
        SCOPED_TRACE("sequence " + std::to_string(j));
        State state(*model, StateOptions{KvType::f16, kCtx});
        alone.eval(state, seqs[j].prompt);
        ASSERT_FALSE(seqs[j].logits.empty());
        EXPECT_BITWISE(to_vector(state.last_logits()), seqs[j].logits[0], "after the prompt");
        for (size_t s = 1; s < seqs[j].logits.size(); ++s) {
            const int32_t next = argmax(state.last_logits());
            alone.eval(state, std::span<const int32_t>(&next, 1));
            EXPECT_BITWISE(to_vector(state.last_logits()), seqs[j].logits[s], "decode step " + std::to_string(s));
        }
        expect_same_state(snapshot(state), snapshot(states[j]), "final state");
    }
}

// (3) Forks sharing KV blocks (a partly filled shared last block at 40 tokens, only full blocks at
// 64) continue differently in one batch, together with the state they were forked from; an untouched
// fork keeps its content (copy-on-write).
void check_forks(const std::string& path) {
    auto model = Model::load(path);
    const int64_t n_vocab = model->n_vocab();
    Evaluator evaluator(model, 2);
    for (int64_t prefix_len : {int64_t{40}, int64_t{64}}) {
        SCOPED_TRACE("prefix " + std::to_string(prefix_len));
        const auto prefix = pseudo_random_tokens(prefix_len, n_vocab, 31);
        State base(*model, StateOptions{KvType::f16, kCtx});
        evaluator.eval(base, prefix);
        const Snapshot base_before = snapshot(base);
        State untouched = base.fork();
        std::vector<State> forks;
        for (int i = 0; i < 3; ++i) forks.push_back(base.fork());
        std::vector<std::vector<int32_t>> continuations;
        for (int i = 0; i < 4; ++i) continuations.push_back(pseudo_random_tokens(1 + 20 * i, n_vocab, 60 + i));
        std::vector<EvalRequest> requests = {{&forks[0], continuations[0]},
                                             {&base, continuations[1]},
                                             {&forks[1], continuations[2]},
                                             {&forks[2], continuations[3]}};
        evaluator.eval_batch(requests);
        for (size_t i = 0; i < requests.size(); ++i) {
            std::vector<int32_t> whole = prefix;
            whole.insert(whole.end(), continuations[i].begin(), continuations[i].end());
            State ref(*model, StateOptions{KvType::f16, kCtx});
            evaluator.eval(ref, whole);
            expect_same_state(snapshot(ref), snapshot(*requests[i].state), "request " + std::to_string(i));
        }
        expect_same_state(base_before, snapshot(untouched), "the untouched fork");
    }
}

// (4) Bad requests: Error with the right code, and no State changed, including KV shared with forks.
void check_errors(const std::string& path, const std::string& other_path) {
    auto model = Model::load(path);
    auto other = Model::load(other_path);
    const int64_t n_vocab = model->n_vocab();
    Evaluator evaluator(model, 2);
    State a(*model, StateOptions{KvType::f16, kCtx});
    evaluator.eval(a, pseudo_random_tokens(40, n_vocab, 1));
    State b = a.fork();  // shares a's partly filled last block
    State c(*model, StateOptions{KvType::f16, 50});
    evaluator.eval(c, pseudo_random_tokens(45, n_vocab, 2));
    State d(*model, StateOptions{KvType::f16, kCtx});  // empty
    State foreign(*other, StateOptions{KvType::f16, kCtx});
    const auto ok = pseudo_random_tokens(150, n_vocab, 3);  // 2 micro-batches with the others
    const auto six = pseudo_random_tokens(6, n_vocab, 4);
    const std::vector<int32_t> bad_low = {1, -1, 2};
    const std::vector<int32_t> bad_high = {1, static_cast<int32_t>(n_vocab)};
    std::vector<float> out1, out2;

    const std::vector<State*> all = {&a, &b, &c, &d};
    struct Case {
        std::string name;
        std::vector<EvalRequest> requests;
        ErrorCode code;
    };
    const std::vector<Case> cases = {
        {"token id -1", {{&a, ok}, {&b, bad_low}, {&d, six}}, ErrorCode::invalid_argument},
        {"token id n_vocab", {{&d, six}, {&a, ok}, {&b, bad_high}}, ErrorCode::invalid_argument},
        {"past the context", {{&a, ok}, {&c, six}, {&d, six}}, ErrorCode::out_of_range},
        {"another model's state", {{&a, ok}, {&foreign, six}, {&b, six}}, ErrorCode::invalid_argument},
        {"the same state twice", {{&a, ok}, {&d, six}, {&a, six}}, ErrorCode::invalid_argument},
        {"the same state twice, once empty", {{&a, ok}, {&a, {}}}, ErrorCode::invalid_argument},
        {"no state", {{&a, ok}, {nullptr, six}}, ErrorCode::invalid_argument},
        {"one all_logits vector twice", {{&a, ok, &out1}, {&d, six, &out1}}, ErrorCode::invalid_argument},
    };
    std::vector<Snapshot> before;
    for (State* s : all) before.push_back(snapshot(*s));
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        try {
            evaluator.eval_batch(c.requests);
            ADD_FAILURE() << "no error";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), c.code) << e.what();
        }
        for (size_t i = 0; i < all.size(); ++i)
            expect_same_state(before[i], snapshot(*all[i]), "state " + std::to_string(i));
    }

    // An error after some micro-batches ran (the progress callback throws after the first): the KV
    // already written is rolled back, shared blocks are untouched.
    int calls = 0;
    evaluator.set_progress([&calls](int64_t done, int64_t total) {
        EXPECT_LE(done, total);
        if (++calls == 1) throw Error(ErrorCode::internal, "stop");
    });
    const std::vector<EvalRequest> good = {{&b, six, &out2}, {&a, ok}, {&d, ok}};
    EXPECT_THROW(evaluator.eval_batch(good), Error);
    EXPECT_EQ(calls, 1);
    for (size_t i = 0; i < all.size(); ++i)
        expect_same_state(before[i], snapshot(*all[i]), "state " + std::to_string(i));

    // The same batch then succeeds, with progress (rows done, rows in all) per micro-batch.
    std::vector<int64_t> progress;
    evaluator.set_progress([&progress](int64_t done, int64_t total) {
        EXPECT_EQ(total, 306);
        progress.push_back(done);
    });
    evaluator.eval_batch(good);
    EXPECT_EQ(progress, (std::vector<int64_t>{128, 256, 306}));
    evaluator.set_progress({});
    State ref(*model, StateOptions{KvType::f16, kCtx});
    evaluator.eval(ref, pseudo_random_tokens(40, n_vocab, 1));
    evaluator.eval(ref, ok);
    expect_same_state(snapshot(ref), snapshot(a), "a after the retried batch");
}

TEST(EvalBatch, PromptsTinyModels) {
    const auto models = fixture_files("tiny", ".gguf");
    ASSERT_FALSE(models.empty()) << "no tiny models in tests/fixtures/tiny";
    for (const auto& path : models) {
        SCOPED_TRACE(path);
        for (int threads : {1, 2}) check_prompts(path, threads);
    }
}

TEST(EvalBatch, DecodeLoopTinyModels) {
    const auto models = fixture_files("tiny", ".gguf");
    ASSERT_FALSE(models.empty());
    for (const auto& path : models) {
        SCOPED_TRACE(path);
        for (int threads : {1, 2}) check_decode_loop(path, threads);
    }
}

TEST(EvalBatch, ForksTinyModels) {
    const auto models = fixture_files("tiny", ".gguf");
    ASSERT_FALSE(models.empty());
    for (const auto& path : models) {
        SCOPED_TRACE(path);
        check_forks(path);
    }
}

TEST(EvalBatch, ErrorsChangeNoState) {
    const auto models = fixture_files("tiny", ".gguf");
    ASSERT_GE(models.size(), 2u);
    check_errors(models[0], models[1]);
}

TEST(EvalBatch, EmptyBatchAndEmptyRequests) {
    const auto models = fixture_files("tiny", ".gguf");
    ASSERT_FALSE(models.empty());
    auto model = Model::load(models[0]);
    Evaluator evaluator(model, 1);
    evaluator.eval_batch({});
    State state(*model, StateOptions{KvType::f16, kCtx});
    std::vector<float> all = {1.0f};
    const std::vector<EvalRequest> requests = {{&state, {}, &all}};
    evaluator.eval_batch(requests);
    EXPECT_EQ(state.n_tokens(), 0);
    EXPECT_TRUE(state.last_logits().empty());
    EXPECT_EQ(all, std::vector<float>{1.0f});  // untouched, as by eval() of no tokens
}

TEST(EvalBatch, SmolLM2) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const std::string path = default_model_path();
    for (int threads : {1, 2}) check_prompts(path, threads);
    check_decode_loop(path, 2);
    check_forks(path);
    const auto tiny = fixture_files("tiny", ".gguf");
    ASSERT_FALSE(tiny.empty());
    check_errors(path, tiny[0]);
}

}  // namespace
}  // namespace kvstash::test
