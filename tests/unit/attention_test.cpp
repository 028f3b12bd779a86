// attention(): against a double-precision causal softmax reference written here, on f16 and f32 caches,
// GQA and MHA, over a block table of several small blocks, on every ISA this CPU runs (attention_with);
// bitwise batch invariance (one call of n tokens vs n calls of one) and thread invariance (pool of 2
// vs none) on each ISA, and every ISA bitwise the scalar per-row definition (attention_per_row_with(Isa::scalar)).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/attention/attention.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "format/quantize.h"
#include "format/tensor_type.h"

namespace kvstash {
namespace {

constexpr double kUnit = 0x1p-24;  // unit roundoff of fp32 (round to nearest)
constexpr int64_t kBlockTokens = 4;

// A cache of n_pos positions in separately allocated blocks of kBlockTokens rows, plus the decoded
// values (exactly what the kernel must read back) for the reference. Rows past n_pos in the last block
// hold NaN, so reading a key beyond the causal range poisons the output.
struct TestCache {
    TensorType type;
    int64_t width;  // n_head_kv * head_dim
    uint64_t row_bytes;
    std::vector<std::unique_ptr<std::vector<uint8_t>>> k_storage, v_storage;
    std::vector<const uint8_t*> k_table, v_table;
    std::vector<float> k, v;  // (n_pos, width) decoded

    TestCache(TensorType t, int64_t n_pos, int64_t w, std::mt19937& rng, float k_sigma) : type(t), width(w) {
        row_bytes = tensor_row_bytes(type, width);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        const int64_t n_blocks = (n_pos + kBlockTokens - 1) / kBlockTokens;
        k.resize(static_cast<size_t>(n_pos * width));
        v.resize(k.size());
        for (int64_t b = 0; b < n_blocks; ++b) {
            for (auto* storage : {&k_storage, &v_storage}) {
                storage->push_back(std::make_unique<std::vector<uint8_t>>(kBlockTokens * row_bytes));
                uint8_t* base = storage->back()->data();
                for (int64_t r = 0; r < kBlockTokens; ++r) {
                    const int64_t pos = b * kBlockTokens + r;
                    if (type == TensorType::Q8_0) {
                        fill_q8_0_row(base + static_cast<uint64_t>(r) * row_bytes, pos, n_pos,
                                      storage == &k_storage ? k_sigma : 1.0f, storage == &k_storage ? k : v, normal,
                                      rng);
                        continue;
                    }
                    for (int64_t i = 0; i < width; ++i) {
                        const bool is_k = storage == &k_storage;
                        const float raw = pos < n_pos ? normal(rng) * (is_k ? k_sigma : 1.0f)
                                                      : std::numeric_limits<float>::quiet_NaN();
                        float stored = raw;
                        uint8_t* dst = base + static_cast<uint64_t>(r) * row_bytes;
                        if (type == TensorType::F16) {
                            const uint16_t h = fp32_to_fp16(raw);
                            std::memcpy(dst + 2 * i, &h, 2);
                            stored = fp16_to_fp32(h);
                        } else {
                            std::memcpy(dst + 4 * i, &raw, 4);
                        }
                        if (pos < n_pos) (is_k ? k : v)[static_cast<size_t>(pos * width + i)] = stored;
                    }
                }
            }
            k_table.push_back(k_storage.back()->data());
            v_table.push_back(v_storage.back()->data());
        }
    }

    // A q8_0 row quantized as the cache stores it (ggml's rounding) and its decoded values; past n_pos,
    // every block's scale is an f16 NaN, so that every value read there is NaN.
    void fill_q8_0_row(uint8_t* dst, int64_t pos, int64_t n_pos, float sigma, std::vector<float>& decoded,
                       std::normal_distribution<float>& normal, std::mt19937& rng) {
        std::vector<float> raw(static_cast<size_t>(width)), back(raw.size());
        for (float& x : raw) x = normal(rng) * sigma;
        quantize_row_q8_0(raw.data(), dst, width);
        if (pos >= n_pos) {
            const uint16_t nan16 = 0x7E00;
            for (int64_t blk = 0; blk < width / 32; ++blk) std::memcpy(dst + 34 * blk, &nan16, 2);
            return;
        }
        dequantize_row(TensorType::Q8_0, dst, back.data(), width);
        std::copy(back.begin(), back.end(), decoded.begin() + pos * width);
    }

    KvLayerView view() const {
        KvLayerView kv;
        kv.type = type;
        kv.block_tokens = kBlockTokens;
        kv.row_bytes = row_bytes;
        kv.k_blocks = k_table.data();
        kv.v_blocks = v_table.data();
        return kv;
    }
};

// Reference output of one (query, head) and its error bound.
//
// Error model (fp32, u = 2^-24, first order; gamma_n = n·u):
//  * score s_j = fl(fl(q·k_j)·scale): |Δs_j| <= (D + 1)·u·scale·Σ_d|q_d·k_jd| (a dot of D terms in any
//    summation order, lanes and FMA included, then one product).
//  * softmax is invariant to the shift by the max, so only the rounding of s_j - m (u·|s_j - m|) and
//    exp_f32 (<= 2u relative: it is within 1 ulp, backends/cpu/exp/exp_f32.h) add, so e_j carries a relative error
//    ε_j <= |Δs_j| + u·|s_j - m| + 2u.
//  * sum of n weights and the weighted value sum (one product and n additions per term) add
//    gamma_n + gamma_{n+1}; the final 1/sum and product add 2u.
//  Perturbing the weights by (1 + ε_j) moves out_d by at most 2·max ε_j · Σ_j p_j·|v_jd|; the roundings of
//  the sums move it by at most (2n + 3)·u·Σ_j p_j·|v_jd|. The bound uses twice that for the neglected
//  second-order terms.
struct RefResult {
    std::vector<double> out;
    std::vector<double> tol;
};

RefResult reference_one(const float* q, const TestCache& c, int64_t last, int64_t kv_head, int64_t head_dim,
                        float scale) {
    const int64_t n_keys = last + 1;
    const int64_t off = kv_head * head_dim;
    std::vector<double> s(static_cast<size_t>(n_keys)), abs_dot(s.size());
    double m = -INFINITY;
    for (int64_t j = 0; j < n_keys; ++j) {
        double dot = 0.0, a = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) {
            const double prod = static_cast<double>(q[d]) * c.k[static_cast<size_t>(j * c.width + off + d)];
            dot += prod;
            a += std::fabs(prod);
        }
        s[static_cast<size_t>(j)] = dot * scale;
        abs_dot[static_cast<size_t>(j)] = a * scale;
        m = std::max(m, s[static_cast<size_t>(j)]);
    }
    double sum = 0.0, max_eps = 0.0;
    std::vector<double> p(s.size());
    for (int64_t j = 0; j < n_keys; ++j) {
        const auto js = static_cast<size_t>(j);
        p[js] = std::exp(s[js] - m);
        sum += p[js];
        const double eps =
            static_cast<double>(head_dim + 1) * kUnit * abs_dot[js] + kUnit * std::fabs(s[js] - m) + 2 * kUnit;
        max_eps = std::max(max_eps, eps);
    }
    RefResult r;
    r.out.assign(static_cast<size_t>(head_dim), 0.0);
    r.tol.assign(static_cast<size_t>(head_dim), 0.0);
    for (int64_t d = 0; d < head_dim; ++d) {
        double acc = 0.0, mag = 0.0;
        for (int64_t j = 0; j < n_keys; ++j) {
            const double w = p[static_cast<size_t>(j)] / sum;
            const double val = c.v[static_cast<size_t>(j * c.width + off + d)];
            acc += w * val;
            mag += w * std::fabs(val);
        }
        r.out[static_cast<size_t>(d)] = acc;
        // Plus an absolute 1e-30: weights below f32's range are 0 in the kernel; where the dominant keys' values
        // are exactly 0 (q8_0 rounds small values to 0) those weights are the whole (tiny) reference output.
        r.tol[static_cast<size_t>(d)] =
            2.0 * (2.0 * max_eps + static_cast<double>(2 * n_keys + 3) * kUnit) * mag + 1e-30;
    }
    return r;
}

// (cache type, n_head_kv (n_head = 6), head_dim, first_pos, n_tokens)
using Params = std::tuple<TensorType, int64_t, int64_t, int64_t, int64_t>;

class AttentionTest : public ::testing::TestWithParam<Params> {
protected:
    void SetUp() override {
        std::tie(type, n_head_kv, head_dim, first_pos, n_tokens) = GetParam();
        shape.n_head = 6;
        shape.n_head_kv = n_head_kv;
        shape.head_dim = head_dim;
        shape.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    }

    std::vector<float> random_queries(std::mt19937& rng, float sigma) const {
        std::normal_distribution<float> normal(0.0f, sigma);
        std::vector<float> q(static_cast<size_t>(n_tokens * shape.n_head * head_dim));
        for (float& x : q) x = normal(rng);
        return q;
    }

    // Runs the kernel and checks every (query, head) against the reference.
    void check_against_reference(float q_sigma, uint32_t seed) {
        std::mt19937 rng(seed);
        const TestCache cache(type, first_pos + n_tokens, n_head_kv * head_dim, rng, 1.0f);
        const std::vector<float> q = random_queries(rng, q_sigma);
        const int64_t group = shape.n_head / n_head_kv;
        const int64_t q_width = shape.n_head * head_dim;
        for (Isa isa : available_isas()) {
            std::vector<float> out(q.size(), std::numeric_limits<float>::quiet_NaN());
            attention_with(isa, shape, cache.view(), q.data(), n_tokens, first_pos, out.data(), nullptr);
            for (int64_t t = 0; t < n_tokens; ++t) {
                for (int64_t h = 0; h < shape.n_head; ++h) {
                    const int64_t base = t * q_width + h * head_dim;
                    const RefResult ref =
                        reference_one(q.data() + base, cache, first_pos + t, h / group, head_dim, shape.scale);
                    for (int64_t d = 0; d < head_dim; ++d) {
                        const auto ds = static_cast<size_t>(d);
                        ASSERT_NEAR(out[static_cast<size_t>(base + d)], ref.out[ds], ref.tol[ds])
                            << isa_name(isa) << " token " << t << " head " << h << " dim " << d;
                    }
                }
            }
        }
    }

    TensorType type = TensorType::F16;
    int64_t n_head_kv = 0, head_dim = 0, first_pos = 0, n_tokens = 0;
    AttentionShape shape;
};

TEST_P(AttentionTest, MatchesDoubleReference) { check_against_reference(1.5f, 1234); }

// Scores of a few hundred: exp() of them overflows fp32 unless the max is subtracted first.
TEST_P(AttentionTest, LargeScoresStayFiniteAndAccurate) { check_against_reference(60.0f, 99); }

TEST_P(AttentionTest, OneCallEqualsTokenByTokenBitwise) {
    std::mt19937 rng(7);
    const TestCache cache(type, first_pos + n_tokens, n_head_kv * head_dim, rng, 1.0f);
    const std::vector<float> q = random_queries(rng, 1.5f);
    const int64_t q_width = shape.n_head * head_dim;
    for (Isa isa : available_isas()) {
        std::vector<float> whole(q.size()), split(q.size());
        attention_with(isa, shape, cache.view(), q.data(), n_tokens, first_pos, whole.data(), nullptr);
        for (int64_t t = 0; t < n_tokens; ++t) {
            attention_with(isa, shape, cache.view(), q.data() + t * q_width, 1, first_pos + t,
                           split.data() + t * q_width, nullptr);
        }
        EXPECT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float))) << isa_name(isa);
    }
}

TEST_P(AttentionTest, ThreadPoolOfTwoEqualsNoPoolBitwise) {
    std::mt19937 rng(11);
    const TestCache cache(type, first_pos + n_tokens, n_head_kv * head_dim, rng, 1.0f);
    const std::vector<float> q = random_queries(rng, 1.5f);
    ThreadPool pool(2);
    for (Isa isa : available_isas()) {
        std::vector<float> serial(q.size()), pooled(q.size());
        attention_with(isa, shape, cache.view(), q.data(), n_tokens, first_pos, serial.data(), nullptr);
        attention_with(isa, shape, cache.view(), q.data(), n_tokens, first_pos, pooled.data(), &pool);
        EXPECT_EQ(0, std::memcmp(serial.data(), pooled.data(), serial.size() * sizeof(float))) << isa_name(isa);
    }
}

// Every ISA's attention (the grouped kernels of backends/cpu/attention/attention_group.h where it has them) is bitwise
// the per-(query, head) definition with the scalar row operations: one set of bits on every ISA
// (docs/architecture/canonical-float-ops.md), with and without a pool (which changes how heads are grouped into tasks).
TEST_P(AttentionTest, EqualsPerRowDefinitionBitwise) {
    std::mt19937 rng(17);
    const TestCache cache(type, first_pos + n_tokens, n_head_kv * head_dim, rng, 1.0f);
    const std::vector<float> q = random_queries(rng, 3.0f);
    ThreadPool pool(2);
    for (Isa isa : available_isas()) {
        std::vector<float> definition(q.size()), serial(q.size()), pooled(q.size());
        attention_per_row_with(Isa::scalar, shape, cache.view(), q.data(), n_tokens, first_pos, definition.data());
        attention_with(isa, shape, cache.view(), q.data(), n_tokens, first_pos, serial.data(), nullptr);
        attention_with(isa, shape, cache.view(), q.data(), n_tokens, first_pos, pooled.data(), &pool);
        EXPECT_EQ(0, std::memcmp(definition.data(), serial.data(), q.size() * sizeof(float))) << isa_name(isa);
        EXPECT_EQ(0, std::memcmp(definition.data(), pooled.data(), q.size() * sizeof(float))) << isa_name(isa);
    }
}

// attention() is attention_with(active_isa()), bitwise.
TEST_P(AttentionTest, DefaultUsesTheActiveIsa) {
    std::mt19937 rng(13);
    const TestCache cache(type, first_pos + n_tokens, n_head_kv * head_dim, rng, 1.0f);
    const std::vector<float> q = random_queries(rng, 1.5f);
    std::vector<float> dispatched(q.size()), explicit_isa(q.size());
    attention(shape, cache.view(), q.data(), n_tokens, first_pos, dispatched.data(), nullptr);
    attention_with(active_isa(), shape, cache.view(), q.data(), n_tokens, first_pos, explicit_isa.data(), nullptr);
    EXPECT_EQ(0, std::memcmp(dispatched.data(), explicit_isa.data(), q.size() * sizeof(float)));
}

std::string param_name(const ::testing::TestParamInfo<Params>& info) {
    const auto& [type, n_head_kv, head_dim, first_pos, n_tokens] = info.param;
    return std::string(tensor_type_name(static_cast<uint32_t>(type))) + (n_head_kv == 6 ? "_mha" : "_gqa") + "_d" +
           std::to_string(head_dim) + "_pos" + std::to_string(first_pos) + "_n" + std::to_string(n_tokens);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Combine(::testing::Values(TensorType::F16, TensorType::F32),
                                            ::testing::Values(int64_t{2}, int64_t{6}),  // GQA 6/2, MHA 6/6
                                            ::testing::Values(int64_t{8}, int64_t{48}, int64_t{64}, int64_t{128}),
                                            // 253 + 5 and 700 cross 256-key chunk boundaries
                                            ::testing::Values(int64_t{0}, int64_t{37}, int64_t{130}, int64_t{253},
                                                              int64_t{700}),
                                            ::testing::Values(int64_t{1}, int64_t{5})),
                         param_name);

// q8_0 caches (head_dim a multiple of 32: a head starts on a block boundary).
INSTANTIATE_TEST_SUITE_P(Q8_0, AttentionTest,
                         ::testing::Combine(::testing::Values(TensorType::Q8_0),
                                            ::testing::Values(int64_t{2}, int64_t{6}),
                                            ::testing::Values(int64_t{32}, int64_t{64}, int64_t{256}),
                                            ::testing::Values(int64_t{0}, int64_t{253}, int64_t{700}),
                                            ::testing::Values(int64_t{1}, int64_t{5})),
                         param_name);

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Long contexts, SmolLM2's and Gemma 3's head shapes, with and without a sliding window: every way of
// running the rows (one call, row by row, no pool or a pool of 2 or 3 threads, which splits few rows over key chunks
// and many rows over heads), on every ISA, gives the scalar per-row definition's bits.
TEST(AttentionChunks, AnyThreadCountAndBatchEqualsDefinitionBitwise) {
    struct Case {
        int64_t n_head, n_head_kv, head_dim, window;
    };
    const int64_t n_pos = 720;
    for (const Case c : {Case{9, 3, 64, 0}, Case{4, 1, 256, 0}, Case{4, 1, 256, 200}, Case{6, 2, 24, 0}}) {
        for (TensorType type : {TensorType::F16, TensorType::F32, TensorType::Q8_0}) {
            if (type == TensorType::F32 && c.head_dim != 64) continue;  // (the f32 path is the same code)
            if (type == TensorType::Q8_0 && c.head_dim % 32 != 0) continue;
            std::mt19937 rng(static_cast<uint32_t>(c.head_dim + c.window));
            const TestCache cache(type, n_pos, c.n_head_kv * c.head_dim, rng, 1.0f);
            AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                                 c.window};
            const int64_t q_width = c.n_head * c.head_dim;
            std::normal_distribution<float> normal(0.0f, 2.0f);
            std::vector<float> q(static_cast<size_t>(n_pos * q_width));
            for (float& x : q) x = normal(rng);
            // Rows first..n_pos-1 at once (many rows) and each of a few rows alone (decode), against the scalar
            // per-row definition (computed once: it does not depend on the ISA under test).
            const int64_t first = 500;
            const int64_t n_rows = n_pos - first;
            std::vector<float> definition(static_cast<size_t>(n_rows * q_width));
            attention_per_row_with(Isa::scalar, shape, cache.view(), q.data() + first * q_width, n_rows, first,
                                   definition.data());
            for (Isa isa : available_isas()) {
                // Under the sanitizers (CI's ASan stage: memory errors, not bits; the Release run checks every
                // path bitwise) the scalar path's batched runs take most of 20 minutes: the vector paths only.
                if (kSanitized && isa == Isa::scalar && available_isas().size() > 1) continue;
                SCOPED_TRACE(std::string(isa_name(isa)) + " d" + std::to_string(c.head_dim) + " window " +
                             std::to_string(c.window) + " " + tensor_type_name(static_cast<uint32_t>(type)));
                for (int threads : {0, 2, 3}) {
                    std::unique_ptr<ThreadPool> pool = threads > 0 ? std::make_unique<ThreadPool>(threads) : nullptr;
                    std::vector<float> batch(definition.size());
                    attention_with(isa, shape, cache.view(), q.data() + first * q_width, n_rows, first, batch.data(),
                                   pool.get());
                    ASSERT_EQ(0, std::memcmp(batch.data(), definition.data(), batch.size() * sizeof(float)))
                        << threads << " threads, one batch";
                    for (int64_t pos : {first, int64_t{511}, int64_t{512}, n_pos - 1}) {
                        std::vector<float> one(static_cast<size_t>(q_width));
                        attention_with(isa, shape, cache.view(), q.data() + pos * q_width, 1, pos, one.data(),
                                       pool.get());
                        ASSERT_EQ(0, std::memcmp(one.data(), definition.data() + (pos - first) * q_width,
                                                 one.size() * sizeof(float)))
                            << threads << " threads, row " << pos << " alone";
                    }
                    std::vector<float> two(static_cast<size_t>(2 * q_width));
                    attention_with(isa, shape, cache.view(), q.data() + 700 * q_width, 2, 700, two.data(), pool.get());
                    ASSERT_EQ(0, std::memcmp(two.data(), definition.data() + (700 - first) * q_width,
                                             two.size() * sizeof(float)))
                        << threads << " threads, rows 700-701";
                }
            }
        }
    }
}

// Decode at a context of 9 chunks (backends/cpu/attention/attention.cpp, split_over_chunks): with 2 threads a single
// row has chunks enough for tasks of (row, chunk) that walk every KV head; with 3 threads it is split over (KV head,
// chunk); two rows take (row, chunk) tasks with both. The per-row definition's bits, f16 and q8_0.
TEST(AttentionChunks, DecodeOverManyChunksEqualsDefinitionBitwise) {
    const int64_t n_pos = 2100;
    const AttentionShape shape{9, 3, 64, 0.125f};
    const int64_t q_width = shape.n_head * shape.head_dim;
    for (TensorType type : {TensorType::F16, TensorType::Q8_0}) {
        std::mt19937 rng(21);
        const TestCache cache(type, n_pos, shape.n_head_kv * shape.head_dim, rng, 1.0f);
        std::normal_distribution<float> normal(0.0f, 2.0f);
        std::vector<float> q(static_cast<size_t>(2 * q_width));
        for (float& x : q) x = normal(rng);
        for (Isa isa : available_isas()) {
            SCOPED_TRACE(std::string(isa_name(isa)) + " " + tensor_type_name(static_cast<uint32_t>(type)));
            std::vector<float> definition(q.size());
            attention_per_row_with(Isa::scalar, shape, cache.view(), q.data(), 2, n_pos - 2, definition.data());
            for (int threads : {2, 3}) {
                ThreadPool pool(threads);
                std::vector<float> one(static_cast<size_t>(q_width)), two(q.size());
                attention_with(isa, shape, cache.view(), q.data() + q_width, 1, n_pos - 1, one.data(), &pool);
                EXPECT_EQ(0, std::memcmp(one.data(), definition.data() + q_width, one.size() * sizeof(float)))
                    << threads << " threads, the last row alone";
                attention_with(isa, shape, cache.view(), q.data(), 2, n_pos - 2, two.data(), &pool);
                EXPECT_EQ(0, std::memcmp(two.data(), definition.data(), two.size() * sizeof(float)))
                    << threads << " threads, the last two rows";
            }
        }
    }
}

// Tiles of rows (backends/cpu/attention/attention.cpp, tiled_rows): the rows of a tile share each K/V chunk read, and
// the chunk tasks are split over threads when the tiles are few (a short suffix after restoring a long state). Suffixes
// of 2..17 rows, starting below, at and across chunk boundaries, with and without a sliding window; and rows of two
// caches interleaved (tiles break where the cache changes): the per-row definition's bits with 0, 2 and 3 threads.
TEST(AttentionChunks, TiledRowsEqualDefinitionBitwise) {
    struct Case {
        int64_t n_head, n_head_kv, head_dim, window;
    };
    const int64_t n_pos = 1100;
    // (first row, rows): below, at and across chunk boundaries (256, 512, 768, 1024)
    const std::pair<int64_t, int64_t> kSuffixes[] = {{1080, 8}, {508, 8}, {250, 17}, {1020, 9}, {767, 2}};
    // 20 rows: 6 of cache a, 3 of b, 1 of a, 10 of b, at scattered positions.
    const int64_t kMixedRows = 20;
    auto kMixedView = [](int64_t i) -> int64_t { return i < 6 || i == 9 ? 0 : 1; };
    auto kMixedPos = [](int64_t i) { return i < 10 ? 1090 + i : 500 + 3 * i; };
    for (const Case c : {Case{9, 3, 64, 0}, Case{4, 1, 256, 300}, Case{6, 2, 24, 0}}) {
        for (TensorType type : {TensorType::F16, TensorType::Q8_0}) {
            if (type == TensorType::Q8_0 && c.head_dim % 32 != 0) continue;
            std::mt19937 rng(static_cast<uint32_t>(7 * c.head_dim + c.window));
            const TestCache a(type, n_pos, c.n_head_kv * c.head_dim, rng, 1.0f);
            const TestCache b(type, n_pos, c.n_head_kv * c.head_dim, rng, 1.0f);
            AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                                 c.window};
            const int64_t q_width = c.n_head * c.head_dim;
            std::normal_distribution<float> normal(0.0f, 2.0f);
            std::vector<float> q(static_cast<size_t>(n_pos * q_width));
            for (float& x : q) x = normal(rng);
            for (Isa isa : available_isas()) {
                SCOPED_TRACE(std::string(isa_name(isa)) + " d" + std::to_string(c.head_dim) + " window " +
                             std::to_string(c.window) + " " + tensor_type_name(static_cast<uint32_t>(type)));
                // The definition of just the rows the calls below compute.
                std::vector<float> def_a(q.size()), def_b(q.size());
                auto define = [&](const TestCache& cache, std::vector<float>& def, int64_t first, int64_t n) {
                    attention_per_row_with(Isa::scalar, shape, cache.view(), q.data() + first * q_width, n, first,
                                           def.data() + first * q_width);
                };
                for (const auto& [first, n] : kSuffixes) define(a, def_a, first, n);
                for (int64_t i = 0; i < kMixedRows; ++i)
                    define(kMixedView(i) == 0 ? a : b, kMixedView(i) == 0 ? def_a : def_b, kMixedPos(i), 1);
                for (int threads : {0, 2, 3}) {
                    std::unique_ptr<ThreadPool> pool = threads > 0 ? std::make_unique<ThreadPool>(threads) : nullptr;
                    for (const auto& [first, n] : kSuffixes) {
                        std::vector<float> out(static_cast<size_t>(n * q_width));
                        attention_with(isa, shape, a.view(), q.data() + first * q_width, n, first, out.data(),
                                       pool.get());
                        ASSERT_EQ(0,
                                  std::memcmp(out.data(), def_a.data() + first * q_width, out.size() * sizeof(float)))
                            << threads << " threads, rows " << first << ".." << first + n - 1;
                    }
                    const KvLayerView views[2] = {a.view(), b.view()};
                    std::vector<int64_t> row_view, row_pos;
                    for (int64_t i = 0; i < kMixedRows; ++i) {
                        row_view.push_back(kMixedView(i));
                        row_pos.push_back(kMixedPos(i));
                    }
                    std::vector<float> rq(static_cast<size_t>(kMixedRows * q_width)), out(rq.size());
                    for (int64_t i = 0; i < kMixedRows; ++i) {
                        std::copy_n(q.data() + row_pos[i] * q_width, q_width, rq.data() + i * q_width);
                    }
                    const AttentionRows rows{kMixedRows, views, row_view.data(), row_pos.data()};
                    attention_rows_with(isa, shape, rows, rq.data(), out.data(), pool.get());
                    for (int64_t i = 0; i < kMixedRows; ++i) {
                        const std::vector<float>& def = row_view[i] == 0 ? def_a : def_b;
                        ASSERT_EQ(0, std::memcmp(out.data() + i * q_width, def.data() + row_pos[i] * q_width,
                                                 q_width * sizeof(float)))
                            << threads << " threads, mixed rows, row " << i;
                    }
                }
            }
        }
    }
}

// Prefill rows of sliding-window layers whose windows start inside a chunk, one key later from row to row (Gemma 3
// 270M's local layers: 4 query heads to 1 KV head, head size 256, window 512; a window of 100 that starts and ends
// in one chunk; SmolLM2's heads): tiles of 32 rows, not aligned to the chunks, whose rows share one call per chunk on
// the AVX2 kernel (AttentionGroupArgs::head_first), and suffixes of 2 and 7 rows. On every ISA, with and without a
// pool, the scalar per-row definition's bits.
TEST(AttentionChunks, WindowsStartingInsideAChunkEqualDefinitionBitwise) {
    struct Case {
        int64_t n_head, n_head_kv, head_dim, window;
    };
    const int64_t n_pos = 1000, first = 760;
    for (const Case c : {Case{4, 1, 256, 512}, Case{4, 1, 256, 100}, Case{9, 3, 64, 300}}) {
        for (TensorType type : {TensorType::F16, TensorType::Q8_0}) {
            std::mt19937 rng(static_cast<uint32_t>(3 * c.head_dim + c.window));
            const TestCache cache(type, n_pos, c.n_head_kv * c.head_dim, rng, 1.0f);
            const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim,
                                       1.0f / std::sqrt(static_cast<float>(c.head_dim)), c.window};
            const int64_t q_width = c.n_head * c.head_dim;
            std::normal_distribution<float> normal(0.0f, 2.0f);
            std::vector<float> q(static_cast<size_t>((n_pos - first) * q_width));
            for (float& x : q) x = normal(rng);
            std::vector<float> definition(q.size());
            attention_per_row_with(Isa::scalar, shape, cache.view(), q.data(), n_pos - first, first, definition.data());
            for (Isa isa : available_isas()) {
                if (kSanitized && isa == Isa::scalar && available_isas().size() > 1) continue;
                SCOPED_TRACE(std::string(isa_name(isa)) + " d" + std::to_string(c.head_dim) + " window " +
                             std::to_string(c.window) + " " + tensor_type_name(static_cast<uint32_t>(type)));
                for (int threads : {0, 2}) {
                    std::unique_ptr<ThreadPool> pool = threads > 0 ? std::make_unique<ThreadPool>(threads) : nullptr;
                    // (first row, rows): all of them, then suffixes of 7 and 2 rows.
                    const std::pair<int64_t, int64_t> calls[] = {{first, n_pos - first}, {900, 7}, {997, 2}};
                    for (const auto& [from, n] : calls) {
                        std::vector<float> out(static_cast<size_t>(n * q_width));
                        attention_with(isa, shape, cache.view(), q.data() + (from - first) * q_width, n, from,
                                       out.data(), pool.get());
                        ASSERT_EQ(0, std::memcmp(out.data(), definition.data() + (from - first) * q_width,
                                                 out.size() * sizeof(float)))
                            << threads << " threads, rows " << from << ".." << from + n - 1;
                    }
                }
            }
        }
    }
}

// The one key a query at position 0 sees: the output is exactly that key's value row (weight 1).
TEST(AttentionSingleKey, OutputIsTheOnlyValueRow) {
    std::mt19937 rng(3);
    const TestCache cache(TensorType::F32, 1, 2 * 8, rng, 1.0f);
    AttentionShape shape{6, 2, 8, 0.25f};
    std::vector<float> q(6 * 8, 0.5f);
    for (Isa isa : available_isas()) {
        std::vector<float> out(q.size());
        attention_with(isa, shape, cache.view(), q.data(), 1, 0, out.data(), nullptr);
        for (int64_t h = 0; h < 6; ++h) {
            for (int64_t d = 0; d < 8; ++d) {
                EXPECT_EQ(out[static_cast<size_t>(h * 8 + d)], cache.v[static_cast<size_t>((h / 3) * 8 + d)])
                    << isa_name(isa) << " head " << h << " dim " << d;
            }
        }
    }
}

}  // namespace
}  // namespace kvstash
