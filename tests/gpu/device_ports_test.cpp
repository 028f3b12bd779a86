// The device code's ports of CPU arithmetic (backends/cuda/device_numerics.cuh, dequant.cuh), compiled for the
// host and run on the CPU: they need no GPU and never skip. They check the ports' logic (block indexing, bit
// manipulation, operation order) against the CPU originals bitwise; the GPU tests then check that the device
// intrinsics round as these host operators do.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/attention/attention_rows.h"
#include "backends/cpu/exp/exp_f32.h"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/device_numerics.cuh"
#include "backends/cuda/kv_codec.cuh"
#include "format/quantize.h"
#include "gpu_test_support.h"

namespace kvstash {
namespace {

template <TensorType Type>
void expect_chunks_equal_the_cpu_decoder(int64_t rows, int64_t cols) {
    const std::vector<uint8_t> w = gpu_test::random_weights(Type, rows, cols, 77);
    const uint64_t row_bytes = tensor_row_bytes(Type, cols);
    ASSERT_EQ(static_cast<int64_t>(row_bytes), cuda::device::row_bytes_of(Type, cols));
    std::vector<float> want(static_cast<size_t>(cols)), got(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w.data() + static_cast<uint64_t>(r) * row_bytes;
        dequantize_row(Type, row, want.data(), cols);
        for (int64_t c = 0; c < cols / 32; ++c) {
            float chunk[32];
            cuda::device::dequantize_chunk<Type>(row, c, chunk);
            std::memcpy(got.data() + c * 32, chunk, sizeof(chunk));
        }
        ASSERT_EQ(-1, gpu_test::first_difference(got, want)) << "row " << r;
    }
}

TEST(DevicePortsOnTheHost, ChunkDecodersAreBitwiseTheCpuDecoder) {
    expect_chunks_equal_the_cpu_decoder<TensorType::BF16>(5, 512);
    expect_chunks_equal_the_cpu_decoder<TensorType::F16>(5, 512);
    expect_chunks_equal_the_cpu_decoder<TensorType::Q8_0>(5, 512);
    expect_chunks_equal_the_cpu_decoder<TensorType::Q4_0>(5, 512);
    expect_chunks_equal_the_cpu_decoder<TensorType::Q4_1>(5, 512);
    expect_chunks_equal_the_cpu_decoder<TensorType::Q4_K>(5, 1024);
    expect_chunks_equal_the_cpu_decoder<TensorType::Q5_K>(5, 1024);
    expect_chunks_equal_the_cpu_decoder<TensorType::Q6_K>(5, 1024);
}

TEST(DevicePortsOnTheHost, Fp16ConversionsAreBitwiseTheCpus) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float want = fp16_to_fp32(static_cast<uint16_t>(h));
        const float got = cuda::device::fp16_to_fp32(static_cast<uint16_t>(h));
        ASSERT_EQ(0, std::memcmp(&want, &got, 4)) << "half 0x" << std::hex << h;
    }
    std::mt19937 rng(3);
    for (int i = 0; i < 2000000; ++i) {
        // Random bit patterns, half of them in the half-precision range (exponents 100..143), where rounding
        // and subnormals happen.
        uint32_t bits = static_cast<uint32_t>(rng());
        if (i % 2 == 0) bits = (bits & 0x807FFFFFu) | ((100u + bits % 44u) << 23);
        float f;
        std::memcpy(&f, &bits, 4);
        ASSERT_EQ(fp32_to_fp16(f), cuda::device::fp32_to_fp16(f)) << "float bits 0x" << std::hex << bits;
    }
}

TEST(DevicePortsOnTheHost, ExpIsBitwiseTheCpus) {
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> wide(-120.0f, 100.0f);
    for (int i = 0; i < 2000000; ++i) {
        const float x = i % 4 == 0 ? std::bit_cast<float>(static_cast<uint32_t>(rng())) : wide(rng);
        const float want = kernels::exp_f32(x);
        const float got = cuda::device::exp_f32(x);
        ASSERT_EQ(0, std::memcmp(&want, &got, 4)) << "x = " << x;
    }
}

TEST(DevicePortsOnTheHost, Q8_0KvBlocksAndReadsAreBitwiseTheCpus) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> unit(-3.0f, 3.0f);
    const int64_t n = 256;
    for (int trial = 0; trial < 2000; ++trial) {
        std::vector<float> x(n);
        for (float& v : x) v = unit(rng);
        if (trial % 3 == 0) {  // values on rounding ties: multiples of max / 254
            for (int64_t i = 0; i < n; ++i)
                x[i] = static_cast<float>(static_cast<int>(i % 9) - 4) * 0.5f * (3.0f / 127.0f);
        }
        if (trial == 1) x[5] = std::numeric_limits<float>::infinity();
        if (trial == 2) x[7] = std::nanf("");
        if (trial == 4) std::fill(x.begin(), x.begin() + 32, 0.0f);
        std::vector<uint8_t> want(n / 32 * 34), got(n / 32 * 34);
        quantize_row_q8_0(x.data(), want.data(), n);
        for (int64_t b = 0; b < n / 32; ++b) cuda::device::quantize_block_q8_0(x.data() + 32 * b, got.data() + 34 * b);
        ASSERT_EQ(want, got) << "trial " << trial;
        for (int64_t i = 0; i < n; ++i) {
            const float a = kernels::q8_0_value(want.data(), i);
            const float c = cuda::device::kv_load(want.data(), i, TensorType::Q8_0);
            ASSERT_EQ(0, std::memcmp(&a, &c, 4)) << i;
        }
        ASSERT_EQ(static_cast<int64_t>(kernels::kv_row_offset(TensorType::Q8_0, 128)),
                  cuda::device::kv_offset(TensorType::Q8_0, 128));
    }
    EXPECT_EQ(static_cast<int64_t>(kernels::kv_row_offset(TensorType::F16, 100)),
              cuda::device::kv_offset(TensorType::F16, 100));
    EXPECT_EQ(static_cast<int64_t>(kernels::kv_row_offset(TensorType::F32, 100)),
              cuda::device::kv_offset(TensorType::F32, 100));
}

}  // namespace
}  // namespace kvstash
