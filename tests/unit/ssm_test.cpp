// The Mamba kernels (backends/cpu/ssm/ssm.h): every ISA this CPU runs bitwise equal to the scalar reference
// (Mamba-1 and Mamba-2 shapes, d_state and channel counts off the vector width), one call equal to
// token-by-token and chunked calls, every thread count the same bits, the reference within a derived
// bound of a double-precision version, the formulas on tiny cases worked out by hand, argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "backends/cpu/ssm/ssm.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

constexpr double kUnit = 0x1p-24;  // unit roundoff of fp32

std::vector<float> random_vector(size_t n, uint32_t seed, float mean, float sigma) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(mean, sigma);
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// ---- the convolution ----

struct ConvProblem {
    int64_t n_tokens = 0, channels = 0, d_conv = 0;
    bool with_bias = true;
    int64_t x_stride = 0, out_stride = 0;  // padded past the row width
    std::vector<float> window0, x, weight, bias;
};

ConvProblem make_conv(int64_t n_tokens, int64_t channels, int64_t d_conv, bool with_bias, uint32_t seed) {
    ConvProblem p;
    p.n_tokens = n_tokens, p.channels = channels, p.d_conv = d_conv, p.with_bias = with_bias;
    p.x_stride = channels + 3, p.out_stride = channels + 5;
    p.window0 = random_vector(static_cast<size_t>((d_conv - 1) * channels), seed, 0.0f, 1.0f);
    p.x = random_vector(static_cast<size_t>(n_tokens * p.x_stride), seed + 1, 0.0f, 1.0f);
    p.weight = random_vector(static_cast<size_t>(channels * d_conv), seed + 2, 0.0f, 0.5f);
    p.bias = random_vector(static_cast<size_t>(channels), seed + 3, 0.0f, 0.5f);
    return p;
}

struct ConvResult {
    std::vector<float> out, window;
};

using ConvRunner = std::function<void(const SsmConvArgs&)>;

// The whole sequence in calls of `chunk` tokens (the last one shorter).
ConvResult run_conv(const ConvProblem& p, int64_t chunk, const ConvRunner& runner) {
    ConvResult r;
    r.window = p.window0;
    r.out.assign(static_cast<size_t>(p.n_tokens * p.out_stride), 0.0f);
    for (int64_t t0 = 0; t0 < p.n_tokens; t0 += chunk) {
        SsmConvArgs a;
        a.n_tokens = std::min(chunk, p.n_tokens - t0);
        a.channels = p.channels, a.d_conv = p.d_conv;
        a.window = r.window.data();
        a.x = p.x.data() + t0 * p.x_stride, a.x_stride = p.x_stride;
        a.weight = p.weight.data();
        a.bias = p.with_bias ? p.bias.data() : nullptr;
        a.out = r.out.data() + t0 * p.out_stride, a.out_stride = p.out_stride;
        runner(a);
    }
    return r;
}

ConvRunner conv_reference() {
    return [](const SsmConvArgs& a) { kernels::reference::ssm_conv(a, 0, a.channels); };
}
ConvRunner conv_on(Isa isa, ThreadPool* pool) {
    return [isa, pool](const SsmConvArgs& a) { ssm_conv_with(isa, a, pool); };
}

TEST(SsmConv, EveryIsaEqualsReferenceBitwise) {
    uint32_t seed = 1;
    for (Isa isa : available_isas()) {
        for (int64_t channels : {1, 5, 8, 13, 16, 17, 33, 1539}) {
            for (int64_t d_conv : {2, 3, 4}) {
                for (int64_t n_tokens : {1, 3, 7}) {
                    const ConvProblem p = make_conv(n_tokens, channels, d_conv, seed % 2 == 0, seed);
                    ++seed;
                    const ConvResult expected = run_conv(p, n_tokens, conv_reference());
                    const ConvResult got = run_conv(p, n_tokens, conv_on(isa, nullptr));
                    const std::string where = std::string(isa_name(isa)) + " channels " + std::to_string(channels) +
                                              " d_conv " + std::to_string(d_conv) + " tokens " +
                                              std::to_string(n_tokens);
                    EXPECT_TRUE(same_bits(expected.out, got.out)) << where;
                    EXPECT_TRUE(same_bits(expected.window, got.window)) << where;
                }
            }
        }
    }
}

// Chunking invariance: one call, token by token, and uneven chunks give the same outputs and window;
// so do pools of 1, 2, 3 threads (1000 channels: several tasks).
TEST(SsmConv, ChunksAndThreadsGiveTheSameBits) {
    ThreadPool pool1(1), pool2(2), pool3(3);
    for (Isa isa : available_isas()) {
        for (int64_t d_conv : {2, 4}) {
            const ConvProblem p = make_conv(9, 1000, d_conv, true, 77);
            const ConvResult whole = run_conv(p, p.n_tokens, conv_on(isa, nullptr));
            for (int64_t chunk : {1, 2, 4}) {
                const ConvResult chunked = run_conv(p, chunk, conv_on(isa, nullptr));
                EXPECT_TRUE(same_bits(whole.out, chunked.out)) << isa_name(isa) << " chunk " << chunk;
                EXPECT_TRUE(same_bits(whole.window, chunked.window)) << isa_name(isa) << " chunk " << chunk;
            }
            for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
                const ConvResult threaded = run_conv(p, p.n_tokens, conv_on(isa, pool));
                EXPECT_TRUE(same_bits(whole.out, threaded.out)) << isa_name(isa) << " threads " << pool->n_threads();
                EXPECT_TRUE(same_bits(whole.window, threaded.window)) << isa_name(isa);
            }
        }
    }
}

// acc is d_conv products and (with the bias) d_conv additions: each term carries at most d_conv + 1
// roundings, |acc - exact| <= (d_conv + 1)·u·Σ|terms| to first order. silu's slope is at most 1.1, and
// silu(acc) itself adds exp_f32's 2u (1 ulp) scaled by e/(1 + e) < 1, then 1 + e and the division (u
// each): |out - silu(exact)| <= 1.1·(d_conv + 1)·u·Σ|terms| + 4u·|out|. Checked with 1.5× for the
// second-order terms.
TEST(SsmConv, ReferenceMatchesDoubleWithinBound) {
    const ConvProblem p = make_conv(6, 40, 4, true, 5);
    const ConvResult r = run_conv(p, 2, conv_reference());
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        for (int64_t c = 0; c < p.channels; ++c) {
            double acc = p.bias[c], magnitude = std::fabs(p.bias[c]);
            for (int64_t k = 0; k < p.d_conv; ++k) {
                const int64_t i = t - p.d_conv + 1 + k;
                const double in = i >= 0 ? p.x[i * p.x_stride + c] : p.window0[(p.d_conv - 1 + i) * p.channels + c];
                acc += in * p.weight[c * p.d_conv + k];
                magnitude += std::fabs(in * p.weight[c * p.d_conv + k]);
            }
            const double exact = acc / (1.0 + std::exp(-acc));
            const double got = r.out[t * p.out_stride + c];
            const double bound =
                1.1 * static_cast<double>(p.d_conv + 1) * kUnit * magnitude + 4 * kUnit * std::fabs(got);
            EXPECT_LE(std::fabs(got - exact), 1.5 * bound) << "t " << t << " c " << c;
        }
    }
}

// 2 channels, d_conv 3, 2 tokens, worked out by hand: channel 0's inputs (oldest first) are window
// 1, 2 then x 3, -1 with taps 0.5, -1, 2 and bias 0.1; channel 1's are -1, 0.5 then 1, 2 with taps
// 1, 1, -0.5 and bias -0.2.
TEST(SsmConv, HandWorkedCase) {
    std::vector<float> window = {1, -1, 2, 0.5f};  // 2 rows × 2 channels
    const std::vector<float> x = {3, 1, -1, 2};
    const std::vector<float> weight = {0.5f, -1, 2, 1, 1, -0.5f};
    const std::vector<float> bias = {0.1f, -0.2f};
    std::vector<float> out(4);
    SsmConvArgs a;
    a.n_tokens = 2, a.channels = 2, a.d_conv = 3;
    a.window = window.data(), a.x = x.data(), a.x_stride = 2, a.weight = weight.data(), a.bias = bias.data();
    a.out = out.data(), a.out_stride = 2;
    // acc: t0 c0 = 0.5·1 - 1·2 + 2·3 + 0.1 = 4.6; t0 c1 = -1 + 0.5 - 0.5 - 0.2 = -1.2;
    //      t1 c0 = 0.5·2 - 1·3 + 2·(-1) + 0.1 = -3.9; t1 c1 = 0.5 + 1 - 0.5·2 - 0.2 = 0.3.
    const double acc[4] = {4.6, -1.2, -3.9, 0.3};
    for (Isa isa : available_isas()) {
        std::vector<float> w = window;
        a.window = w.data();
        ssm_conv_with(isa, a, nullptr);
        for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], acc[i] / (1 + std::exp(-acc[i])), 1e-5) << isa_name(isa);
        EXPECT_EQ(w, (std::vector<float>{3, 1, -1, 2})) << "the window holds the last two inputs";
    }
}

// ---- the scan ----

struct ScanShape {
    int64_t n_head, head_dim, d_state, n_group;
    bool per_state_decay, with_D;
};

struct ScanProblem {
    ScanShape shape{};
    int64_t n_tokens = 0;
    int64_t x_stride = 0, dt_stride = 0, bc_stride = 0;  // padded past the row widths
    std::vector<float> state0, x, dt, A, B, C, D;
};

ScanProblem make_scan(const ScanShape& s, int64_t n_tokens, uint32_t seed) {
    ScanProblem p;
    p.shape = s, p.n_tokens = n_tokens;
    const int64_t width = s.n_head * s.head_dim;
    p.x_stride = width + 2, p.dt_stride = s.n_head + 1, p.bc_stride = s.n_group * s.d_state + 3;
    const auto n = [&](int64_t rows, int64_t stride) { return static_cast<size_t>(rows * stride); };
    p.state0 = random_vector(n(width, s.d_state), seed, 0.0f, 1.0f);
    p.x = random_vector(n(n_tokens, p.x_stride), seed + 1, 0.0f, 1.0f);
    p.dt = random_vector(n(n_tokens, p.dt_stride), seed + 2, -1.0f, 2.5f);
    for (size_t i = 3; i < p.dt.size(); i += 17) p.dt[i] = 20.0f + static_cast<float>(i % 5);  // softplus's cut
    p.A = random_vector(n(s.n_head, s.per_state_decay ? s.d_state : 1), seed + 3, 0.0f, 1.0f);
    for (float& a : p.A) a = -std::exp(a);  // GGUF ssm_a = -exp(A_log)
    p.B = random_vector(n(n_tokens, p.bc_stride), seed + 4, 0.0f, 1.0f);
    p.C = random_vector(n(n_tokens, p.bc_stride), seed + 5, 0.0f, 1.0f);
    p.D = random_vector(static_cast<size_t>(s.n_head), seed + 6, 0.0f, 1.0f);
    return p;
}

struct ScanResult {
    std::vector<float> y, state;
};

using ScanRunner = std::function<void(const SsmScanArgs&)>;

SsmScanArgs scan_args(const ScanProblem& p, int64_t t0, int64_t n_tokens, float* state, float* y) {
    const ScanShape& s = p.shape;
    SsmScanArgs a;
    a.n_tokens = n_tokens;
    a.n_head = s.n_head, a.head_dim = s.head_dim, a.d_state = s.d_state, a.n_group = s.n_group;
    a.per_state_decay = s.per_state_decay;
    a.state = state;
    a.x = p.x.data() + t0 * p.x_stride, a.x_stride = p.x_stride;
    a.dt = p.dt.data() + t0 * p.dt_stride, a.dt_stride = p.dt_stride;
    a.A = p.A.data();
    a.B = p.B.data() + t0 * p.bc_stride, a.B_stride = p.bc_stride;
    a.C = p.C.data() + t0 * p.bc_stride, a.C_stride = p.bc_stride;
    a.D = s.with_D ? p.D.data() : nullptr;
    a.y = y + t0 * p.x_stride, a.y_stride = p.x_stride;
    return a;
}

ScanResult run_scan(const ScanProblem& p, int64_t chunk, const ScanRunner& runner) {
    ScanResult r;
    r.state = p.state0;
    r.y.assign(p.x.size(), 0.0f);
    for (int64_t t0 = 0; t0 < p.n_tokens; t0 += chunk) {
        runner(scan_args(p, t0, std::min(chunk, p.n_tokens - t0), r.state.data(), r.y.data()));
    }
    return r;
}

ScanRunner scan_reference() {
    return [](const SsmScanArgs& a) { kernels::reference::ssm_scan(a, 0, a.n_head); };
}
ScanRunner scan_on(Isa isa, ThreadPool* pool) {
    return [isa, pool](const SsmScanArgs& a) { ssm_scan_with(isa, a, pool); };
}

std::string describe(const ScanShape& s) {
    return std::string(s.per_state_decay ? "mamba1" : "mamba2") + " n_head " + std::to_string(s.n_head) + " head_dim " +
           std::to_string(s.head_dim) + " d_state " + std::to_string(s.d_state) + " n_group " +
           std::to_string(s.n_group) + (s.with_D ? " D" : " no D");
}

std::vector<ScanShape> scan_shapes() {
    std::vector<ScanShape> shapes;
    for (int64_t d_state : {16, 5, 12, 20, 29, 33}) shapes.push_back({48, 1, d_state, 1, true, true});  // n_embd 24
    shapes.push_back({48, 1, 16, 1, true, false});
    for (int64_t d_state : {16, 64, 128, 5, 12, 20, 24, 29, 33}) {
        for (int64_t n_group : {1, 2}) shapes.push_back({8, 16, d_state, n_group, false, true});
    }
    shapes.push_back({8, 16, 64, 2, false, false});
    shapes.push_back({6, 3, 24, 3, false, true});
    return shapes;
}

TEST(SsmScan, EveryIsaEqualsReferenceBitwise) {
    uint32_t seed = 100;
    for (Isa isa : available_isas()) {
        for (const ScanShape& shape : scan_shapes()) {
            for (int64_t n_tokens : {1, 4}) {
                const ScanProblem p = make_scan(shape, n_tokens, seed += 10);
                const ScanResult expected = run_scan(p, n_tokens, scan_reference());
                const ScanResult got = run_scan(p, n_tokens, scan_on(isa, nullptr));
                EXPECT_TRUE(same_bits(expected.y, got.y)) << isa_name(isa) << " " << describe(shape);
                EXPECT_TRUE(same_bits(expected.state, got.state)) << isa_name(isa) << " " << describe(shape);
            }
        }
    }
}

// y may be written over x (same stride), as the model does.
TEST(SsmScan, OutputOverInputEqualsSeparateOutput) {
    for (Isa isa : available_isas()) {
        for (const ScanShape& shape : {ScanShape{48, 1, 16, 1, true, true}, ScanShape{8, 16, 20, 2, false, true}}) {
            const ScanProblem p = make_scan(shape, 3, 9);
            const ScanResult separate = run_scan(p, p.n_tokens, scan_on(isa, nullptr));
            std::vector<float> state = p.state0, xy = p.x;
            SsmScanArgs a = scan_args(p, 0, p.n_tokens, state.data(), xy.data());
            a.x = xy.data();
            ssm_scan_with(isa, a, nullptr);
            for (int64_t t = 0; t < p.n_tokens; ++t) {
                const int64_t width = shape.n_head * shape.head_dim;
                EXPECT_EQ(0, std::memcmp(&xy[t * p.x_stride], &separate.y[t * p.x_stride], width * sizeof(float)))
                    << isa_name(isa) << " " << describe(shape) << " t " << t;
            }
            EXPECT_TRUE(same_bits(state, separate.state)) << isa_name(isa);
        }
    }
}

// A task's part (kernel_table(isa).ssm_scan / ssm_conv over a range, as the pool runs them) writes
// only its heads' / channels' state and outputs, and those equal the reference's on the same range.
TEST(SsmKernels, RangeTouchesOnlyItsHeadsAndChannels) {
    for (Isa isa : available_isas()) {
        for (const ScanShape& shape : {ScanShape{40, 1, 16, 1, true, true}, ScanShape{8, 4, 20, 2, false, true}}) {
            const ScanProblem p = make_scan(shape, 3, 17);
            const int64_t begin = 3, end = shape.n_head == 40 ? 21 : 6;
            const ScanResult expected =
                run_scan(p, 3, [&](const SsmScanArgs& a) { kernels::reference::ssm_scan(a, begin, end); });
            const ScanResult got =
                run_scan(p, 3, [&](const SsmScanArgs& a) { kernels::kernel_table(isa).ssm_scan(a, begin, end); });
            EXPECT_TRUE(same_bits(expected.y, got.y)) << isa_name(isa) << " " << describe(shape);
            EXPECT_TRUE(same_bits(expected.state, got.state)) << isa_name(isa) << " " << describe(shape);
            const int64_t per_head = shape.head_dim * shape.d_state;
            EXPECT_EQ(0, std::memcmp(got.state.data(), p.state0.data(), begin * per_head * sizeof(float)));
            EXPECT_EQ(0, std::memcmp(got.state.data() + end * per_head, p.state0.data() + end * per_head,
                                     (shape.n_head - end) * per_head * sizeof(float)))
                << isa_name(isa) << " " << describe(shape) << ": heads past the range changed";
            for (int64_t t = 0; t < p.n_tokens; ++t) {
                for (int64_t c = 0; c < shape.n_head * shape.head_dim; ++c) {
                    if (c >= begin * shape.head_dim && c < end * shape.head_dim) continue;
                    ASSERT_EQ(got.y[t * p.x_stride + c], 0.0f) << isa_name(isa) << " y written outside, t " << t;
                }
            }
        }
        const ConvProblem p = make_conv(3, 40, 4, true, 3);
        const int64_t begin = 5, end = 22;
        const ConvResult expected =
            run_conv(p, 3, [&](const SsmConvArgs& a) { kernels::reference::ssm_conv(a, begin, end); });
        const ConvResult got =
            run_conv(p, 3, [&](const SsmConvArgs& a) { kernels::kernel_table(isa).ssm_conv(a, begin, end); });
        EXPECT_TRUE(same_bits(expected.out, got.out)) << isa_name(isa);
        EXPECT_TRUE(same_bits(expected.window, got.window)) << isa_name(isa);
        for (int64_t r = 0; r < p.d_conv - 1; ++r) {
            for (int64_t c = 0; c < p.channels; ++c) {
                if (c >= begin && c < end) continue;
                ASSERT_EQ(got.window[r * p.channels + c], p.window0[r * p.channels + c]) << isa_name(isa) << " c " << c;
            }
        }
        for (int64_t t = 0; t < p.n_tokens; ++t) {
            for (int64_t c = 0; c < p.channels; ++c) {
                if (c >= begin && c < end) continue;
                ASSERT_EQ(got.out[t * p.out_stride + c], 0.0f) << isa_name(isa) << " c " << c;
            }
        }
    }
}

// Chunking invariance and threads: one call, token by token, uneven chunks, pools of 1, 2, 3 threads.
TEST(SsmScan, ChunksAndThreadsGiveTheSameBits) {
    ThreadPool pool1(1), pool2(2), pool3(3);
    // Sizes that the split gives several tasks: Mamba-1 blocks of heads, Mamba-2 heads.
    const ScanShape shapes[] = {{512, 1, 16, 1, true, true}, {8, 16, 64, 2, false, true}, {8, 16, 33, 1, false, true}};
    for (Isa isa : available_isas()) {
        for (const ScanShape& shape : shapes) {
            const ScanProblem p = make_scan(shape, 16, 31);
            const ScanResult whole = run_scan(p, p.n_tokens, scan_on(isa, nullptr));
            for (int64_t chunk : {1, 3, 5}) {
                const ScanResult chunked = run_scan(p, chunk, scan_on(isa, nullptr));
                EXPECT_TRUE(same_bits(whole.y, chunked.y)) << isa_name(isa) << " " << describe(shape) << " " << chunk;
                EXPECT_TRUE(same_bits(whole.state, chunked.state)) << isa_name(isa) << " " << describe(shape);
            }
            for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
                const ScanResult threaded = run_scan(p, p.n_tokens, scan_on(isa, pool));
                EXPECT_TRUE(same_bits(whole.y, threaded.y)) << isa_name(isa) << " threads " << pool->n_threads();
                EXPECT_TRUE(same_bits(whole.state, threaded.state)) << isa_name(isa) << " " << describe(shape);
            }
        }
    }
}

// The scan in double, with a running first-order bound on the reference's error (each fp32 operation
// rounds with relative error <= u; exp_f32 is within 1 ulp <= 2u relative, plus 2^-149 absolute where
// it is subnormal; glibc's log1pf within 2 ulp <= 4u):
//   dts: exp_f32's 2u passes through log1p scaled by z / ((1 + z)·log1p(z)) <= 1, then log1pf's 4u:
//        |Δdts| <= 6u·dts (0 when dt > 20: dts = dt exactly)
//   xdt = x·dts: |Δ| <= |x|·|Δdts| + u·|xdt|;   arg = dts·a: |Δ| <= |a|·|Δdts| + u·|arg|
//   dA = exp_f32(arg): |ΔdA| <= dA·(|Δarg| + 2u) + 2^-149
//   state' = state·dA + B·xdt: |Δ| <= |Δstate|·dA + |state|·|ΔdA| + u·|state·dA|
//                                     + |B|·|Δxdt| + u·|B·xdt| + u·|state'|
//   y = Σ state·C (+ x·D): every product is rounded once and then passes through at most
//        ceil(d_state / 16) additions in its partial sum and 4 in the combination:
//        |Δy| <= Σ|Δstate|·|C| + (ceil(d_state / 16) + 5)·u·Σ|state·C| + 2u·|x·D| + u·|y|
// The test allows 1.5× the bound for the second-order terms (products of two deltas).
struct DoubleScan {
    std::vector<double> y, y_bound, state, state_bound;
};

DoubleScan scan_in_double(const ScanProblem& p) {
    const ScanShape& sh = p.shape;
    DoubleScan r;
    r.state.assign(p.state0.begin(), p.state0.end());
    r.state_bound.assign(p.state0.size(), 0.0);
    r.y.assign(p.x.size(), 0.0);
    r.y_bound.assign(p.x.size(), 0.0);
    const double u = kUnit;
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        for (int64_t h = 0; h < sh.n_head; ++h) {
            const int64_t g = h / (sh.n_head / sh.n_group);
            const double dt = p.dt[t * p.dt_stride + h];
            const double dts = dt > 20 ? dt : std::log1p(std::exp(dt));
            const double dts_err = dt > 20 ? 0 : 6 * u * dts;
            for (int64_t i = 0; i < sh.head_dim; ++i) {
                const int64_t ch = h * sh.head_dim + i;
                const double x = p.x[t * p.x_stride + ch];
                const double xdt = x * dts, xdt_err = std::fabs(x) * dts_err + u * std::fabs(xdt);
                double y = 0, y_err = 0, magnitude = 0;
                for (int64_t s = 0; s < sh.d_state; ++s) {
                    const double a = sh.per_state_decay ? p.A[h * sh.d_state + s] : p.A[h];
                    const double arg = dts * a, arg_err = std::fabs(a) * dts_err + u * std::fabs(arg);
                    const double dA = std::exp(arg), dA_err = dA * (arg_err + 2 * u) + 0x1p-149;
                    const double B = p.B[t * p.bc_stride + g * sh.d_state + s];
                    const double C = p.C[t * p.bc_stride + g * sh.d_state + s];
                    double& st = r.state[ch * sh.d_state + s];
                    double& err = r.state_bound[ch * sh.d_state + s];
                    const double next = st * dA + B * xdt;
                    err = err * dA + std::fabs(st) * dA_err + u * std::fabs(st * dA) + std::fabs(B) * xdt_err +
                          u * std::fabs(B * xdt) + u * std::fabs(next);
                    st = next;
                    y += st * C;
                    y_err += err * std::fabs(C);
                    magnitude += std::fabs(st * C);
                }
                y_err += static_cast<double>((sh.d_state + 15) / 16 + 5) * u * magnitude;
                if (sh.with_D) {
                    y += x * p.D[h];
                    y_err += 2 * u * std::fabs(x * p.D[h]);
                }
                r.y[t * p.x_stride + ch] = y;
                r.y_bound[t * p.x_stride + ch] = y_err + u * std::fabs(y);
            }
        }
    }
    return r;
}

TEST(SsmScan, ReferenceMatchesDoubleWithinBound) {
    for (const ScanShape& shape : {ScanShape{48, 1, 16, 1, true, true}, ScanShape{8, 16, 128, 2, false, true},
                                   ScanShape{8, 16, 33, 1, false, false}}) {
        const ScanProblem p = make_scan(shape, 6, 55);
        const ScanResult r = run_scan(p, 2, scan_reference());
        const DoubleScan d = scan_in_double(p);
        int checked = 0;
        for (int64_t t = 0; t < p.n_tokens; ++t) {
            for (int64_t c = 0; c < shape.n_head * shape.head_dim; ++c, ++checked) {
                const size_t k = static_cast<size_t>(t * p.x_stride + c);
                ASSERT_LE(std::fabs(r.y[k] - d.y[k]), 1.5 * d.y_bound[k])
                    << describe(shape) << " t " << t << " c " << c;
            }
        }
        for (size_t k = 0; k < d.state.size(); ++k) {
            ASSERT_LE(std::fabs(r.state[k] - d.state[k]), 1.5 * d.state_bound[k]) << describe(shape) << " state " << k;
        }
        EXPECT_GT(checked, 0);
    }
}

// Mamba-2 by hand: 4 heads of 1 channel, d_state 2, 2 groups (heads 0, 1 read group 0; heads 2, 3 group
// 1), dt = 0 everywhere so dts = softplus(0) = ln 2 = L, A = -1 so dA = exp(-L) = 1/2, state from 0.
//   x: t0 {1, 2, 3, 4}, t1 {-1, 1, 2, 0.5};  D {0.5, -1, 2, 0.25}
//   B: t0 g0 {1, 2}, g1 {3, -1}; t1 g0 {0.5, 1}, g1 {-2, 1}
//   C: t0 g0 {1, -1}, g1 {2, 1}; t1 g0 {1, 1}, g1 {0.5, -1}
// t0: state = B·x·L, so y = x·L·(B·C) + x·D with B·C = -1 (g0), 5 (g1).
// t1: state = state/2 + B·x·L: head 0 {0, 0}, head 1 {1.5L, 3L}, head 2 {0.5L, 0.5L}, head 3 {5L, -1.5L}.
TEST(SsmScan, HandWorkedMamba2) {
    const double L = std::log(2.0);
    const double expected[8] = {-L + 0.5, -2 * L - 2,  15 * L + 6,    20 * L + 1,
                                -0.5,     4.5 * L - 1, -0.25 * L + 4, 4 * L + 0.125};
    for (Isa isa : available_isas()) {
        std::vector<float> state(8, 0.0f), y(8, 0.0f);
        const std::vector<float> x = {1, 2, 3, 4, -1, 1, 2, 0.5f}, dt(8, 0.0f), A(4, -1.0f), D = {0.5f, -1, 2, 0.25f};
        const std::vector<float> B = {1, 2, 3, -1, 0.5f, 1, -2, 1}, C = {1, -1, 2, 1, 1, 1, 0.5f, -1};
        SsmScanArgs a;
        a.n_tokens = 2, a.n_head = 4, a.head_dim = 1, a.d_state = 2, a.n_group = 2;
        a.state = state.data(), a.x = x.data(), a.x_stride = 4, a.dt = dt.data(), a.dt_stride = 4, a.A = A.data();
        a.B = B.data(), a.B_stride = 4, a.C = C.data(), a.C_stride = 4, a.D = D.data(), a.y = y.data(), a.y_stride = 4;
        ssm_scan_with(isa, a, nullptr);
        for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[i], expected[i], 1e-5) << isa_name(isa) << " y " << i;
        EXPECT_NEAR(state[2], 1.5 * L, 1e-6) << isa_name(isa);  // head 1, state 0
    }
}

// Mamba-1 by hand: 2 channels, d_state 2, per-state A: channel 0 {-1, -2} with dt 0 (dts = L, dA =
// {1/2, 1/4}); channel 1 {-1, -0.5} with dt 1 (dts = S = log1p(e), dA = {E1, E2} = {e^-S, e^-S/2}).
// State starts {1, 1} (channel 0), {0, 2} (channel 1); x: t0 {1, 2}, t1 {3, -1}; B: t0 {1, -1}, t1 {2, 0.5};
// C: t0 {1, 2}, t1 {-1, 1}; D {1, 0.5}.
//   channel 0: t0 state {0.5 + L, 0.25 - L}, y = 2 - L; t1 state {0.25 + 6.5L, 0.0625 + 1.25L},
//              y = 2.8125 - 5.25L
//   channel 1: t0 state {2S, 2E2 - 2S}, y = 4E2 - 2S + 1; t1 state {2S·E1 - 2S, 2E2² - 2S·E2 - 0.5S},
//              y = 1.5S - 2S·E1 + 2E2² - 2S·E2 - 0.5
TEST(SsmScan, HandWorkedMamba1) {
    const double L = std::log(2.0), S = std::log1p(std::exp(1.0)), E1 = std::exp(-S), E2 = std::exp(-0.5 * S);
    const double expected[4] = {2 - L, 4 * E2 - 2 * S + 1, 2.8125 - 5.25 * L,
                                1.5 * S - 2 * S * E1 + 2 * E2 * E2 - 2 * S * E2 - 0.5};
    for (Isa isa : available_isas()) {
        std::vector<float> state = {1, 1, 0, 2}, y(4, 0.0f);
        const std::vector<float> x = {1, 2, 3, -1}, dt = {0, 1, 0, 1}, A = {-1, -2, -1, -0.5f}, D = {1, 0.5f};
        const std::vector<float> B = {1, -1, 2, 0.5f}, C = {1, 2, -1, 1};
        SsmScanArgs a;
        a.n_tokens = 2, a.n_head = 2, a.head_dim = 1, a.d_state = 2, a.n_group = 1, a.per_state_decay = true;
        a.state = state.data(), a.x = x.data(), a.x_stride = 2, a.dt = dt.data(), a.dt_stride = 2, a.A = A.data();
        a.B = B.data(), a.B_stride = 2, a.C = C.data(), a.C_stride = 2, a.D = D.data(), a.y = y.data(), a.y_stride = 2;
        ssm_scan_with(isa, a, nullptr);
        for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], expected[i], 1e-5) << isa_name(isa) << " y " << i;
        EXPECT_NEAR(state[0], 0.25 + 6.5 * L, 1e-5) << isa_name(isa);
    }
}

template <typename Fn>
void expect_invalid(Fn&& fn, const char* what) {
    try {
        fn();
        ADD_FAILURE() << "no error: " << what;
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << what << ": " << e.what();
    }
}

TEST(SsmConv, RejectsBadArguments) {
    const ConvProblem p = make_conv(3, 8, 4, true, 1);
    std::vector<float> window = p.window0, out(static_cast<size_t>(3 * p.out_stride));
    SsmConvArgs good;
    good.n_tokens = 3, good.channels = 8, good.d_conv = 4, good.window = window.data();
    good.x = p.x.data(), good.x_stride = p.x_stride, good.weight = p.weight.data(), good.bias = p.bias.data();
    good.out = out.data(), good.out_stride = p.out_stride;
    ssm_conv(good, nullptr);  // valid as given
    const auto bad = [&](const char* what, auto&& change) {
        SsmConvArgs a = good;
        change(a);
        expect_invalid([&] { ssm_conv(a, nullptr); }, what);
    };
    bad("d_conv 1", [](SsmConvArgs& a) { a.d_conv = 1; });
    bad("negative tokens", [](SsmConvArgs& a) { a.n_tokens = -1; });
    bad("null x", [](SsmConvArgs& a) { a.x = nullptr; });
    bad("null window", [](SsmConvArgs& a) { a.window = nullptr; });
    bad("null weight", [](SsmConvArgs& a) { a.weight = nullptr; });
    bad("null out", [](SsmConvArgs& a) { a.out = nullptr; });
    bad("short x stride", [](SsmConvArgs& a) { a.x_stride = 7; });
    bad("out over x", [&](SsmConvArgs& a) { a.out = const_cast<float*>(p.x.data()) + 1; });
    bad("out over window", [&](SsmConvArgs& a) { a.out = window.data(); });
    if (!cpu_supports(Isa::avx512)) {
        expect_invalid([&] { ssm_conv_with(Isa::avx512, good, nullptr); }, "an ISA this CPU lacks");
    }
}

TEST(SsmScan, RejectsBadArguments) {
    ScanProblem p = make_scan({8, 4, 16, 2, false, true}, 3, 1);
    std::vector<float> state = p.state0, y(p.x.size());
    const SsmScanArgs good = scan_args(p, 0, 3, state.data(), y.data());
    ssm_scan(good, nullptr);  // valid as given
    const auto bad = [&](const char* what, auto&& change) {
        SsmScanArgs a = good;
        change(a);
        expect_invalid([&] { ssm_scan(a, nullptr); }, what);
    };
    bad("n_group 2 does not divide 7", [](SsmScanArgs& a) { a.n_head = 7; });  // other sizes still fit
    bad("n_group 0", [](SsmScanArgs& a) { a.n_group = 0; });
    bad("d_state 0", [](SsmScanArgs& a) { a.d_state = 0; });
    bad("head_dim 0", [](SsmScanArgs& a) { a.head_dim = 0; });
    bad("negative tokens", [](SsmScanArgs& a) { a.n_tokens = -2; });
    bad("null state", [](SsmScanArgs& a) { a.state = nullptr; });
    bad("null dt", [](SsmScanArgs& a) { a.dt = nullptr; });
    bad("null A", [](SsmScanArgs& a) { a.A = nullptr; });
    bad("null B", [](SsmScanArgs& a) { a.B = nullptr; });
    bad("null C", [](SsmScanArgs& a) { a.C = nullptr; });
    bad("null y", [](SsmScanArgs& a) { a.y = nullptr; });
    bad("short B stride", [](SsmScanArgs& a) { a.B_stride = 31; });
    bad("y shifted over x", [&](SsmScanArgs& a) { a.y = const_cast<float*>(a.x) + 1; });
    bad("y over the state", [&](SsmScanArgs& a) { a.y = state.data(); });
}

}  // namespace
}  // namespace kvstash
