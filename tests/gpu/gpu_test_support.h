// Helpers of the GPU tests: the skip when no CUDA device is usable, device buffers, random weights in every
// block layout the CUDA kernels take (finite scales, random quant bytes), bitwise comparison.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/cuda_ops.cuh"
#include "format/tensor_type.h"

namespace kvstash::gpu_test {

// At the top of every GPU test: skips it (loudly: gpu_main.cpp prints a banner too) without a device.
#define KVSTASH_REQUIRE_GPU()                                                                         \
    do {                                                                                              \
        if (::kvstash::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped"; \
    } while (0)

#define KVSTASH_CUDA_OK(expr) ASSERT_EQ(cudaSuccess, (expr)) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

// A device allocation of `n` elements of T, freed at scope exit.
template <typename T>
class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t n) : n_(n) {
        if (cudaMalloc(reinterpret_cast<void**>(&p_), n == 0 ? 1 : n * sizeof(T)) != cudaSuccess) p_ = nullptr;
    }
    explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
    ~DeviceBuffer() { cudaFree(p_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    T* get() const { return p_; }
    bool ok() const { return p_ != nullptr; }
    void upload(const std::vector<T>& host) {
        if (p_ != nullptr && !host.empty())
            cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    }
    std::vector<T> download() const {
        std::vector<T> host(n_);
        if (p_ != nullptr && n_ > 0) cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
        return host;
    }

private:
    T* p_ = nullptr;
    size_t n_ = 0;
};

inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// rows × cols weights of `type` in its GGUF layout: F16 / BF16 from uniform [-1, 1]; block types with random
// quant bytes and finite scales (uniform [0.001, 0.05]; q4_1 / q4_K mins alike).
inline std::vector<uint8_t> random_weights(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    const uint64_t row_bytes = tensor_row_bytes(type, cols);
    std::vector<uint8_t> w(row_bytes * static_cast<uint64_t>(rows));
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    std::uniform_real_distribution<float> scale(0.001f, 0.05f);
    auto put16 = [&](size_t at, uint16_t v) { std::memcpy(&w[at], &v, 2); };
    if (type == TensorType::F16 || type == TensorType::BF16) {
        for (size_t i = 0; i < w.size() / 2; ++i) {
            const float f = unit(rng);
            uint32_t bits;
            std::memcpy(&bits, &f, 4);
            put16(2 * i, type == TensorType::F16 ? fp32_to_fp16(f) : static_cast<uint16_t>(bits >> 16));
        }
        return w;
    }
    for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
    const TensorTypeTraits& traits = tensor_type_traits(type);
    for (size_t block = 0; block < w.size() / traits.type_size; ++block) {
        const size_t at = block * traits.type_size;
        switch (type) {
            case TensorType::Q8_0:
            case TensorType::Q4_0: put16(at, fp32_to_fp16(scale(rng))); break;
            case TensorType::Q4_1:
            case TensorType::Q4_K:
            case TensorType::Q5_K:
                put16(at, fp32_to_fp16(scale(rng)));
                put16(at + 2, fp32_to_fp16(scale(rng)));
                break;
            case TensorType::Q6_K: put16(at + 208, fp32_to_fp16(scale(rng))); break;
            default: break;
        }
    }
    return w;
}

inline bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// The first index where a and b differ in bits, or -1.
// The index of the first element whose bits differ (-1: none); prints that element and the next few of both
// sides (value and bits) to stderr, so that a failure on the GPU machine says what the kernel wrote.
inline int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            for (size_t j = i; j < i + 4 && j < a.size() && j < b.size(); ++j) {
                uint32_t x = 0, y = 0;
                std::memcpy(&x, &a[j], 4);
                std::memcpy(&y, &b[j], 4);
                std::fprintf(stderr, "  element %zu: got %.9g (0x%08x), want %.9g (0x%08x)\n", j,
                             static_cast<double>(a[j]), x, static_cast<double>(b[j]), y);
            }
            return static_cast<int64_t>(i);
        }
    }
    return a.size() == b.size() ? -1 : static_cast<int64_t>(std::min(a.size(), b.size()));
}

inline const std::vector<TensorType>& gpu_weight_types() {
    static const std::vector<TensorType> types = {TensorType::BF16, TensorType::F16,  TensorType::Q8_0,
                                                  TensorType::Q4_0, TensorType::Q4_1, TensorType::Q4_K,
                                                  TensorType::Q5_K, TensorType::Q6_K};
    return types;
}

}  // namespace kvstash::gpu_test
