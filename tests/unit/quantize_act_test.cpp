// The activation quantizer (backends/cpu/matmul/quantize_act.h): each ISA's version against the scalar one.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/runtime/dispatch.h"
#include "support/random_operands.h"

namespace kvstash {
namespace {

using test::random_activations;

// A SIMD activation quantizer against the scalar one, bitwise, including values the matmul tests do
// not produce: NaN, ±inf, subnormals, -0, huge and tiny magnitudes. (Used on x86 only.)
[[maybe_unused]] void expect_equals_scalar(kernels::QuantizeRowFn simd) {
    for (int64_t block : {32, 256}) {
        const int64_t cols = 1024;
        std::vector<float> x = random_activations(cols, 31 + static_cast<uint32_t>(block));
        x[3] = std::numeric_limits<float>::quiet_NaN();
        x[static_cast<size_t>(cols - 1)] = std::numeric_limits<float>::quiet_NaN();  // last of a block and a lane
        x[40] = std::numeric_limits<float>::infinity();
        x[300] = -std::numeric_limits<float>::infinity();
        x[70] = 1e-40f;  // subnormal
        x[71] = -0.0f;
        for (int64_t k = 512; k < 512 + block; ++k) x[static_cast<size_t>(k)] = 1e-30f * static_cast<float>(k % 7);
        for (int64_t k = 768; k < 768 + 32; ++k) x[static_cast<size_t>(k)] = 3e37f * static_cast<float>(k % 5 - 2);
        struct Out {
            std::vector<int8_t> h, l;
            std::vector<float> d;
            std::vector<int32_t> h32, l32, h16, l16;
        };
        auto run = [&](kernels::QuantizeRowFn fn) {
            Out o{std::vector<int8_t>(cols),       std::vector<int8_t>(cols),       std::vector<float>(cols / block),
                  std::vector<int32_t>(cols / 32), std::vector<int32_t>(cols / 32), std::vector<int32_t>(cols / 16),
                  std::vector<int32_t>(cols / 16)};
            fn(x.data(), cols, block, o.h.data(), o.l.data(), o.d.data(), o.h32.data(), o.l32.data(), o.h16.data(),
               o.l16.data());
            return o;
        };
        const Out a = run(kernels::reference::quantize_activation_row), b = run(simd);
        EXPECT_EQ(a.h, b.h) << block;
        EXPECT_EQ(a.l, b.l) << block;
        EXPECT_EQ(0, std::memcmp(a.d.data(), b.d.data(), 4 * a.d.size())) << block;
        EXPECT_EQ(a.h32, b.h32) << block;
        EXPECT_EQ(a.l32, b.l32) << block;
        EXPECT_EQ(a.h16, b.h16) << block;
        EXPECT_EQ(a.l16, b.l16) << block;
    }
}

// The quantizer of every path's kernel table (on aarch64 the NEON one), bitwise the scalar one.
TEST(QuantizeActivations, EveryIsaTableEqualsScalarBitwise) {
    for (Isa isa : available_isas()) {
        SCOPED_TRACE(isa_name(isa));
        expect_equals_scalar(kernels::kernel_table(isa).quantize_activation_row);
    }
}

#if KVSTASH_HAVE_X86_KERNELS  // the x86 kernel files are compiled for x86 only
TEST(QuantizeActivations, Avx512EqualsScalarBitwise) {
    // Compiled for AVX-512 F/BW/VL/DQ and used on both AVX-512 paths, with and without VNNI.
    if (!cpu_supports(Isa::avx512)) GTEST_SKIP() << "no AVX-512 F/BW/VL/DQ on this CPU";
    expect_equals_scalar(kernels::quantize_activation_row_avx512);
}

TEST(QuantizeActivations, Avx2EqualsScalarBitwise) {
    if (!cpu_supports(Isa::avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
    expect_equals_scalar(kernels::quantize_activation_row_avx2);
}
#endif

// The int16 plane q that quantize_activations adds is 256 h + l, per row, and copy_activation_rows
// keeps it.
TEST(QuantizeActivations, Int16PlaneIsTheTwoPlanesCombined) {
    const int64_t cols = 256, n_tokens = 3;
    const std::vector<float> x = random_activations(n_tokens * cols, 77);
    kernels::QuantizedActivations xa, part;
    kernels::quantize_activations(x.data(), n_tokens, cols, 32, xa, nullptr);
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t i = 0; i < cols; ++i) {
            ASSERT_EQ(256 * xa.h_row(t)[i] + xa.l_row(t)[i], xa.q_row(t)[i]) << t << " " << i;
        }
    }
    kernels::copy_activation_rows(xa, 1, 2, part);
    ASSERT_EQ(0, std::memcmp(part.q_row(0), xa.q_row(1), 2 * 2 * cols));
}

}  // namespace
}  // namespace kvstash
