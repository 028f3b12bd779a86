// RMSNorm, RoPE, SwiGLU and the residual / bias adds on the GPU: bitwise the CPU's scalar references (which every CPU
// ISA equals), so batch-invariant with them.
#include <cmath>
#include <limits>

#include "backends/cpu/activation/activation.h"
#include "backends/cpu/norm/norm.h"
#include "backends/cpu/rope/rope_rotate.h"
#include "gpu_test_support.h"

namespace kvstash {
namespace {

using gpu_test::DeviceBuffer;

TEST(GpuRmsNorm, BitwiseTheCpuRowForEveryLength) {
    KVSTASH_REQUIRE_GPU();
    const float eps = 1e-5f;
    for (int64_t n : {1, 3, 16, 17, 576, 2053, 4096}) {
        SCOPED_TRACE(n);
        const int64_t n_rows = 37, stride = n + 3;
        const std::vector<float> x = gpu_test::random_floats(static_cast<size_t>(n_rows * stride), -4.0f, 4.0f, 1);
        const std::vector<float> weight = gpu_test::random_floats(static_cast<size_t>(n), 0.5f, 1.5f, 2);
        DeviceBuffer<float> x_dev(x), w_dev(weight), out_dev(x.size());
        KVSTASH_CUDA_OK(cuda::rms_norm(x_dev.get(), w_dev.get(), out_dev.get(), n_rows, n, stride, eps, nullptr));
        KVSTASH_CUDA_OK(cudaDeviceSynchronize());
        const std::vector<float> got = out_dev.download();
        std::vector<float> want(static_cast<size_t>(n));
        for (int64_t r = 0; r < n_rows; ++r) {
            const float* row = x.data() + r * stride;
            // backends/cpu/norm/norm.cpp's steps with the reference sum of squares.
            const double sum = kernels::reference::sum_of_squares(row, n);
            const float mean = static_cast<float>(sum / static_cast<double>(n));
            const float scale = 1.0f / std::sqrt(mean + eps);
            kernels::reference::scale_row(row, weight.data(), scale, want.data(), n);
            ASSERT_TRUE(gpu_test::same_bits(got.data() + r * stride, want.data(), static_cast<size_t>(n)))
                << "row " << r;
        }
    }
}

TEST(GpuRope, RotateBitwiseTheReferenceInBothLayouts) {
    KVSTASH_REQUIRE_GPU();
    const int64_t n_rows = 11, n_heads = 6, head_dim = 64;
    for (RopeLayout layout : {RopeLayout::normal, RopeLayout::neox}) {
        for (int64_t half : {int64_t{32}, int64_t{16}}) {  // full and partial rotation
            const int64_t stride = n_heads * head_dim + 5;
            const std::vector<float> x = gpu_test::random_floats(static_cast<size_t>(n_rows * stride), -3.0f, 3.0f, 3);
            const std::vector<float> c = gpu_test::random_floats(static_cast<size_t>(n_rows * half), -1.0f, 1.0f, 4);
            const std::vector<float> s = gpu_test::random_floats(static_cast<size_t>(n_rows * half), -1.0f, 1.0f, 5);
            DeviceBuffer<float> x_dev(x), c_dev(c), s_dev(s);
            KVSTASH_CUDA_OK(cuda::rope_rotate(layout, x_dev.get(), n_rows, stride, n_heads, head_dim, half, c_dev.get(),
                                              s_dev.get(), nullptr));
            KVSTASH_CUDA_OK(cudaDeviceSynchronize());
            std::vector<float> want = x;
            for (int64_t t = 0; t < n_rows; ++t) {
                for (int64_t h = 0; h < n_heads; ++h) {
                    kernels::reference::rope_rotate(layout, want.data() + t * stride + h * head_dim, half, 0,
                                                    c.data() + t * half, s.data() + t * half);
                }
            }
            EXPECT_EQ(-1, gpu_test::first_difference(x_dev.download(), want))
                << (layout == RopeLayout::normal ? "normal" : "neox") << " half " << half;
        }
    }
}

// The device's angles against RopeTable::angles' arithmetic (backends/cpu/rope/rope.cpp), with Llama 3.1-style
// frequency divisors folded into inv_freq. Bitwise unless the device's double cos/sin (<= 2 ulp in double)
// rounds to another float: expected never on these inputs; a failure says how many of them differ.
TEST(GpuRope, AnglesMatchTheHostTable) {
    KVSTASH_REQUIRE_GPU();
    const int64_t half = 64;
    std::vector<float> inv_freq(half);
    for (int64_t i = 0; i < half; ++i) {
        const float exponent = static_cast<float>(2 * i) / 128.0f;
        inv_freq[i] = 1.0f / std::pow(500000.0f, exponent) / (i < 20 ? 1.0f : (i < 40 ? 3.7f : 8.0f));
    }
    std::vector<int64_t> positions;
    for (int64_t p = 0; p < 4096; ++p) positions.push_back(p * 31 % 131072);
    const float position_scale = 1.0f;
    DeviceBuffer<int64_t> pos_dev(positions);
    DeviceBuffer<float> f_dev(inv_freq), c_dev(positions.size() * half), s_dev(positions.size() * half);
    KVSTASH_CUDA_OK(cuda::rope_angles(pos_dev.get(), static_cast<int64_t>(positions.size()), f_dev.get(), half,
                                      position_scale, c_dev.get(), s_dev.get(), nullptr));
    KVSTASH_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> c = c_dev.download(), s = s_dev.download();
    int64_t differ = 0;
    for (size_t t = 0; t < positions.size(); ++t) {
        const float p = static_cast<float>(positions[t]) * position_scale;
        for (int64_t i = 0; i < half; ++i) {
            const double angle = static_cast<double>(p * inv_freq[i]);
            differ += static_cast<float>(std::cos(angle)) != c[t * half + i];
            differ += static_cast<float>(std::sin(angle)) != s[t * half + i];
        }
    }
    EXPECT_EQ(0, differ) << "of " << 2 * positions.size() * half << " values";
}

TEST(GpuSwiglu, BitwiseTheReferenceIncludingExtremes) {
    KVSTASH_REQUIRE_GPU();
    const int64_t n_rows = 5, n = 1000;
    std::vector<float> gate = gpu_test::random_floats(static_cast<size_t>(n_rows * n), -30.0f, 30.0f, 6);
    const float inf = std::numeric_limits<float>::infinity();
    const float specials[] = {0.0f,   -0.0f,   1e-30f, -1e-30f, 88.0f, -88.0f,
                              104.5f, -104.5f, 200.0f, -200.0f, inf};  // not -inf: -inf / inf is a NaN, whose payload
                                                                       // the GPU and the CPU spell differently
    for (size_t i = 0; i < std::size(specials); ++i) gate[i] = specials[i];
    const std::vector<float> up = gpu_test::random_floats(static_cast<size_t>(n_rows * n), -2.0f, 2.0f, 7);
    DeviceBuffer<float> g_dev(gate), u_dev(up), out_dev(gate.size());
    KVSTASH_CUDA_OK(cuda::swiglu(g_dev.get(), n, u_dev.get(), n, out_dev.get(), n, n_rows, n, nullptr));
    KVSTASH_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> want(gate.size());
    kernels::reference::swiglu(gate.data(), up.data(), want.data(), n_rows * n);
    EXPECT_EQ(-1, gpu_test::first_difference(out_dev.download(), want));
}

TEST(GpuRowAdd, ResidualAndBiasBitwiseTheCpuLoops) {
    KVSTASH_REQUIRE_GPU();
    const int64_t rows = 7, n = 300;
    const std::vector<float> x = gpu_test::random_floats(static_cast<size_t>(rows * n), -3.0f, 3.0f, 8);
    const std::vector<float> y = gpu_test::random_floats(static_cast<size_t>(rows * n), -3.0f, 3.0f, 9);
    const std::vector<float> bias = gpu_test::random_floats(static_cast<size_t>(n), -1.0f, 1.0f, 10);
    for (float scale : {1.0f, 0.7071f}) {
        DeviceBuffer<float> x_dev(x), y_dev(y);
        KVSTASH_CUDA_OK(cuda::add_residual(x_dev.get(), y_dev.get(), rows * n, scale, nullptr));
        KVSTASH_CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> want = x;
        for (size_t i = 0; i < want.size(); ++i) want[i] += scale != 1.0f ? y[i] * scale : y[i];
        EXPECT_EQ(-1, gpu_test::first_difference(x_dev.download(), want)) << "scale " << scale;
    }
    DeviceBuffer<float> y_dev(y), b_dev(bias);
    KVSTASH_CUDA_OK(cuda::add_bias(y_dev.get(), b_dev.get(), rows, n, nullptr));
    KVSTASH_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> want = y;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < n; ++i) want[r * n + i] += bias[i];
    }
    EXPECT_EQ(-1, gpu_test::first_difference(y_dev.download(), want));
}

}  // namespace
}  // namespace kvstash
