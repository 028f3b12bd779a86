// A verification batch of speculative decoding (docs/speculative.md: the pending token and k - 1 guesses, k
// consecutive rows of one sequence at the end of a long state) gives bitwise what k single decode steps give, for
// k = 2..16 at contexts of 2K to 8K keys:
//   - the attention kernel (attention_rows_with: rows of one cache go as a tile that reads each K/V chunk once for
//     all of them, its (KV head, chunk) tasks split over the threads; backends/cpu/attention/attention.cpp) on every
//     ISA this CPU runs, with pools of 2 and 4 threads, on SmolLM2's, Gemma 3's (global and
//     sliding-window) and a 128-wide head shape, over f16 and q8_0 caches, rows across a 256-key chunk
//     boundary and not: each row against that row evaluated alone, and the single rows against the scalar per-row
//     definition (attention_per_row_with);
//   - whole models (the tiny llama with grouped-query attention and the tiny Gemma 3) through Evaluator::eval after
//     a 1,020-token prefix, on every numerics path (KVSTASH_ISA=scalar, avx2, avx512-novnni, avx512 where the CPU
//     has them: support/every_path.h), with 2 and 3 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/attention/attention.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "format/quantize.h"
#include "format/tensor_type.h"
#include "kv/kv_cache.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "support/eval_helpers.h"
#include "support/every_path.h"
#include "support/paths.h"

namespace kvstash {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

constexpr int64_t kMaxRows = 16;

// One layer of a real KvCache holding n_pos positions of random K/V rows, stored as the CPU backend's kv_store
// stores them (f32 as is, f16 rounded, q8_0 quantized from the row alone).
KvCache random_cache(KvType kv_type, int64_t n_pos, int64_t width, std::mt19937& rng) {
    KvCache cache(1, width, kv_type);
    cache.grow(n_pos);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(width));
    for (int64_t pos = 0; pos < n_pos; ++pos) {
        for (uint8_t* dst : {cache.k_row(0, pos), cache.v_row(0, pos)}) {
            for (float& x : row) x = normal(rng);
            if (kv_type == KvType::f32) {
                std::memcpy(dst, row.data(), row.size() * sizeof(float));
            } else if (kv_type == KvType::q8_0) {
                quantize_row_q8_0(row.data(), dst, width);
            } else {
                for (int64_t i = 0; i < width; ++i) {
                    const uint16_t h = fp32_to_fp16(row[static_cast<size_t>(i)]);
                    std::memcpy(dst + 2 * i, &h, 2);
                }
            }
        }
    }
    return cache;
}

// Rows first..first + n - 1 of one cache, as the engine's segment attention passes a verification batch.
void attend_rows(Isa isa, const AttentionShape& shape, const KvLayerView& view, const float* q, int64_t first,
                 int64_t n, float* out, ThreadPool* pool) {
    std::vector<int64_t> row_view(static_cast<size_t>(n), 0), row_pos;
    for (int64_t t = 0; t < n; ++t) row_pos.push_back(first + t);
    const AttentionRows rows{n, &view, row_view.data(), row_pos.data()};
    attention_rows_with(isa, shape, rows, q, out, pool);
}

struct Case {
    int64_t n_head, n_head_kv, head_dim, window;
    KvType kv_type;
    std::vector<int64_t> first_rows;  // the k rows cross a 256-key chunk boundary from 2040 + 9, 4090 + 7, 8180 + 13
};

TEST(VerifyRows, KRowBatchEqualsKSingleStepsBitwise) {
    const Case cases[] = {
        {9, 3, 64, 0, KvType::f16, {2040, 4090}},   // SmolLM2
        {9, 3, 64, 0, KvType::q8_0, {2040}},        //
        {4, 1, 256, 0, KvType::f16, {2040, 8180}},  // Gemma 3 270M, global layers
        {4, 1, 256, 0, KvType::q8_0, {2040}},       //
        {4, 1, 256, 512, KvType::f16, {4090}},      // ... its sliding-window layers
        {16, 4, 128, 0, KvType::f16, {4090}},       // a 128-wide head (the 2048×16 benchmark model's)
    };
    // Pools of 2 and 4 threads: with fewer than 4 × threads (row, KV head) tasks the rows go to the few-rows split
    // (every k on Gemma's single KV head with 4 threads). (Without a pool the rows were a tile already.)
    std::unique_ptr<ThreadPool> pools[] = {std::make_unique<ThreadPool>(2), std::make_unique<ThreadPool>(4)};
    ThreadPool* decode_pool = pools[0].get();
    for (const Case& c : cases) {
        const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                                   c.window};
        const int64_t q_width = c.n_head * c.head_dim;
        const auto row_floats = static_cast<size_t>(q_width);
        for (const int64_t first : c.first_rows) {
            std::mt19937 rng(static_cast<uint32_t>(first + c.head_dim + c.window));
            KvCache cache = random_cache(c.kv_type, first + kMaxRows, c.n_head_kv * c.head_dim, rng);
            const KvLayerView view = cache.layer_view(0);
            std::normal_distribution<float> normal(0.0f, 2.0f);
            std::vector<float> q(static_cast<size_t>(kMaxRows) * row_floats);
            for (float& x : q) x = normal(rng);
            const bool first_context = first == c.first_rows.front();
            std::vector<float> definition;  // the single rows' bits (every ISA's: checked below)
            if (first_context) {
                definition.resize(q.size());
                attention_per_row_with(Isa::scalar, shape, view, q.data(), kMaxRows, first, definition.data());
            }
            for (Isa isa : available_isas()) {
                // The scalar path: every k with the decode pool at each case's first context only, and not under the
                // sanitizers (memory errors, not bits: the Release run checks it), where its long rows take minutes.
                const bool scalar = isa == Isa::scalar && available_isas().size() > 1;
                if (scalar && (kSanitized || !first_context)) continue;
                SCOPED_TRACE(std::string(isa_name(isa)) + " heads " + std::to_string(c.n_head) + "/" +
                             std::to_string(c.n_head_kv) + " d" + std::to_string(c.head_dim) + " window " +
                             std::to_string(c.window) + " " + std::string(kv_type_name(c.kv_type)) + " rows from " +
                             std::to_string(first));
                std::vector<float> singles(q.size());
                for (int64_t t = 0; t < kMaxRows; ++t) {
                    attend_rows(isa, shape, view, q.data() + t * q_width, first + t, 1, singles.data() + t * q_width,
                                decode_pool);
                }
                if (!definition.empty()) {
                    ASSERT_EQ(0, std::memcmp(singles.data(), definition.data(), q.size() * sizeof(float)))
                        << "single rows against the per-row definition";
                }
                for (const auto& pool : pools) {
                    if (scalar && pool.get() != decode_pool) continue;
                    for (int64_t k = 2; k <= kMaxRows; ++k) {
                        std::vector<float> batch(static_cast<size_t>(k) * row_floats);
                        attend_rows(isa, shape, view, q.data(), first, k, batch.data(), pool.get());
                        for (int64_t t = 0; t < k; ++t) {
                            ASSERT_EQ(0, std::memcmp(batch.data() + t * q_width, singles.data() + t * q_width,
                                                     row_floats * sizeof(float)))
                                << k << " rows, " << pool->n_threads() << " threads: row " << t
                                << " differs from its single step";
                        }
                    }
                }
            }
        }
    }
}

// Logits of `k` tokens after `state`'s prefix, evaluated in one batch or one token per eval() (decode steps).
std::vector<float> logits_after(Evaluator& evaluator, const State& state, std::span<const int32_t> tokens,
                                bool one_batch) {
    State branch = state.fork();
    std::vector<float> all, one;
    if (one_batch) {
        evaluator.eval(branch, tokens, &all);
        return all;
    }
    for (const int32_t token : tokens) {
        evaluator.eval(branch, std::span<const int32_t>(&token, 1), &one);
        all.insert(all.end(), one.begin(), one.end());
    }
    return all;
}

// Whole models on this process's path (KVSTASH_ISA, or the CPU's best): a batch of k tokens after a 1,020-token
// state gives the logits of k single steps, bitwise.
TEST(VerifyRows, ModelBatchEqualsSingleStepsOnThisPath) {
    constexpr int64_t kPrefix = 1020;  // the k rows cross the 1024-key chunk boundary from k = 5
    for (const char* name : {"tiny/q_q8_0.gguf", "gemma3_tiny/gemma3_tiny_f32.gguf"}) {
        const std::shared_ptr<const Model> model = Model::load(test::fixture_path(name));
        const std::vector<int32_t> tokens = test::pseudo_random_tokens(kPrefix + kMaxRows, model->n_vocab(), 30);
        State state(*model, StateOptions{KvType::f16, kPrefix + kMaxRows + 8});
        Evaluator(model, 2).eval(state, std::span<const int32_t>(tokens.data(), kPrefix));
        for (int threads : {2, 3}) {
            SCOPED_TRACE(std::string(name) + ", " + std::to_string(threads) + " threads, KVSTASH_ISA " +
                         isa_name(active_isa()));
            Evaluator evaluator(model, threads);
            const auto guesses = std::span<const int32_t>(tokens).subspan(kPrefix);
            const std::vector<float> steps = logits_after(evaluator, state, guesses, false);
            for (int64_t k = 2; k <= kMaxRows; ++k) {
                const std::vector<float> batch = logits_after(evaluator, state, guesses.first(k), true);
                ASSERT_EQ(batch.size(), static_cast<size_t>(k * model->n_vocab()));
                EXPECT_EQ(0, std::memcmp(batch.data(), steps.data(), batch.size() * sizeof(float)))
                    << "a batch of " << k << " tokens after " << kPrefix;
            }
        }
    }
}

// The test above on every numerics path this CPU runs, in child processes (KVSTASH_ISA is read once per process).
TEST(VerifyRows, ModelBatchEqualsSingleStepsOnEveryPath) {
    if (test::forced_isa())
        GTEST_SKIP() << "KVSTASH_ISA is set: ModelBatchEqualsSingleStepsOnThisPath checks that path";
    for (const std::string& setting : test::failing_paths("VerifyRows.ModelBatchEqualsSingleStepsOnThisPath")) {
        ADD_FAILURE() << "a verification batch differs from single steps on KVSTASH_ISA=" << setting;
    }
}

}  // namespace
}  // namespace kvstash
