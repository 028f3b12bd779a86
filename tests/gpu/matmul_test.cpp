// The dequantizing matmul and the row decoders on the GPU: decoding bitwise the CPU's dequantize_row for every
// weight type, products within a rounding bound of reference::matmul, and batch invariance (a row's output
// bits do not depend on how many rows share the call or where the row sits in it).
#include <cmath>
#include <string>

#include "backends/cpu/matmul/matmul.h"
#include "gpu_test_support.h"

namespace kvstash {
namespace {

using gpu_test::DeviceBuffer;

std::string name_of(TensorType type) { return tensor_type_name(static_cast<uint32_t>(type)); }

TEST(GpuDequantize, EveryTypeBitwiseTheCpuDecoderAndEmbedScale) {
    KVSTASH_REQUIRE_GPU();
    const int64_t rows = 9, cols = 512;
    const std::vector<int32_t> ids = {3, 0, 8, 3, 5, 1};
    for (TensorType type : gpu_test::gpu_weight_types()) {
        SCOPED_TRACE(name_of(type));
        const std::vector<uint8_t> w = gpu_test::random_weights(type, rows, cols, 11);
        DeviceBuffer<uint8_t> w_dev(w);
        DeviceBuffer<int32_t> ids_dev(ids);
        DeviceBuffer<float> out_dev(ids.size() * cols);
        KVSTASH_CUDA_OK(cuda::dequantize_rows(type, w_dev.get(), cols, ids_dev.get(), static_cast<int64_t>(ids.size()),
                                              out_dev.get(), nullptr));
        KVSTASH_CUDA_OK(cudaDeviceSynchronize());
        const std::vector<float> got = out_dev.download();
        std::vector<float> want(ids.size() * cols);
        const uint64_t row_bytes = tensor_row_bytes(type, cols);
        for (size_t i = 0; i < ids.size(); ++i) {
            dequantize_row(type, w.data() + static_cast<uint64_t>(ids[i]) * row_bytes, want.data() + i * cols, cols);
        }
        EXPECT_EQ(-1, gpu_test::first_difference(got, want));
        // With an embedding scale (gemma3's sqrt(n_embd)): the CPU backend's out[i] *= scale after decoding.
        const float scale = 45.254833f;
        KVSTASH_CUDA_OK(cuda::dequantize_rows(type, w_dev.get(), cols, ids_dev.get(), static_cast<int64_t>(ids.size()),
                                              out_dev.get(), nullptr, scale));
        KVSTASH_CUDA_OK(cudaDeviceSynchronize());
        for (float& x : want) x *= scale;
        EXPECT_EQ(-1, gpu_test::first_difference(out_dev.download(), want)) << "scaled";
    }
}

// Y = X · Wᵀ on the GPU for the first n_tokens rows of X (f32).
std::vector<float> gpu_matmul(TensorType type, const DeviceBuffer<uint8_t>& w, int64_t rows, int64_t cols,
                              const float* x_dev, int64_t n_tokens) {
    DeviceBuffer<float> y(static_cast<size_t>(n_tokens * rows));
    cuda::MatmulArgs a;
    a.type = type;
    a.W = w.get();
    a.rows = rows;
    a.cols = cols;
    a.X = x_dev;
    a.x_stride = cols;
    a.n_tokens = n_tokens;
    a.Y = y.get();
    a.y_stride = rows;
    EXPECT_EQ(cudaSuccess, cuda::matmul(a, nullptr));
    EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize());
    return y.download();
}

// |gpu - ref| <= 2 * cols * 2^-24 * sum |w x| (two sums of cols terms in different orders, each within
// (cols - 1) * u * sum |w x| of the exact value, u = 2^-24).
void expect_close_to_reference(TensorType type, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                               const std::vector<float>& x, int64_t n_tokens, const std::vector<float>& got) {
    std::vector<float> want(static_cast<size_t>(n_tokens * rows));
    reference::matmul(type, w.data(), rows, cols, x.data(), n_tokens, want.data());
    std::vector<float> w_row(static_cast<size_t>(cols));
    const uint64_t row_bytes = tensor_row_bytes(type, cols);
    for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(type, w.data() + static_cast<uint64_t>(r) * row_bytes, w_row.data(), cols);
        for (int64_t t = 0; t < n_tokens; ++t) {
            double magnitude = 0.0;
            for (int64_t k = 0; k < cols; ++k) magnitude += std::fabs(double(w_row[k]) * x[t * cols + k]);
            const double bound = 2.0 * static_cast<double>(cols) * std::ldexp(1.0, -24) * magnitude + 1e-30;
            ASSERT_LE(std::fabs(double(got[t * rows + r]) - want[t * rows + r]), bound)
                << "row " << r << " token " << t;
        }
    }
}

TEST(GpuMatmul, EveryTypeMatchesTheScalarReference) {
    KVSTASH_REQUIRE_GPU();
    const int64_t rows = 40, cols = 512, n_tokens = 19;
    const std::vector<float> x = gpu_test::random_floats(static_cast<size_t>(n_tokens * cols), -1.0f, 1.0f, 5);
    DeviceBuffer<float> x_dev(x);
    for (TensorType type : gpu_test::gpu_weight_types()) {
        SCOPED_TRACE(name_of(type));
        const std::vector<uint8_t> w = gpu_test::random_weights(type, rows, cols, 21);
        DeviceBuffer<uint8_t> w_dev(w);
        const std::vector<float> got = gpu_matmul(type, w_dev, rows, cols, x_dev.get(), n_tokens);
        expect_close_to_reference(type, w, rows, cols, x, n_tokens, got);
    }
}

TEST(GpuMatmul, Bf16ActivationsMatchTheReferenceOnTheirF32Values) {
    KVSTASH_REQUIRE_GPU();
    const int64_t rows = 24, cols = 256, n_tokens = 5;
    std::vector<float> x = gpu_test::random_floats(static_cast<size_t>(n_tokens * cols), -1.0f, 1.0f, 6);
    std::vector<uint16_t> x_bf16(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        uint32_t bits;
        std::memcpy(&bits, &x[i], 4);
        x_bf16[i] = static_cast<uint16_t>(bits >> 16);
        x[i] = bf16_to_fp32(x_bf16[i]);  // the reference sees the exact values the GPU reads
    }
    DeviceBuffer<uint16_t> x_dev(x_bf16);
    for (TensorType type : {TensorType::BF16, TensorType::Q4_K}) {
        SCOPED_TRACE(name_of(type));
        const std::vector<uint8_t> w = gpu_test::random_weights(type, rows, cols, 22);
        DeviceBuffer<uint8_t> w_dev(w);
        DeviceBuffer<float> y(static_cast<size_t>(n_tokens * rows));
        cuda::MatmulArgs a;
        a.type = type;
        a.W = w_dev.get();
        a.rows = rows;
        a.cols = cols;
        a.X = x_dev.get();
        a.x_type = cuda::Activations::bf16;
        a.x_stride = cols;
        a.n_tokens = n_tokens;
        a.Y = y.get();
        a.y_stride = rows;
        KVSTASH_CUDA_OK(cuda::matmul(a, nullptr));
        KVSTASH_CUDA_OK(cudaDeviceSynchronize());
        expect_close_to_reference(type, w, rows, cols, x, n_tokens, y.download());
    }
}

// The rows of a 256-row product, recomputed in batches of 1..256 rows starting at several offsets (so a row
// sits at every position of a token tile): every row's bits equal the 256-row call's.
TEST(GpuMatmul, BatchInvariantFrom1To256Rows) {
    KVSTASH_REQUIRE_GPU();
    const int64_t rows = 72, cols = 1024, all = 256;
    const std::vector<float> x = gpu_test::random_floats(static_cast<size_t>(all * cols), -1.0f, 1.0f, 7);
    DeviceBuffer<float> x_dev(x);
    for (TensorType type : gpu_test::gpu_weight_types()) {
        SCOPED_TRACE(name_of(type));
        const std::vector<uint8_t> w = gpu_test::random_weights(type, rows, cols, 31);
        DeviceBuffer<uint8_t> w_dev(w);
        const std::vector<float> full = gpu_matmul(type, w_dev, rows, cols, x_dev.get(), all);
        for (int64_t offset : {0, 1, 3, 7}) {
            for (int64_t n : {1, 2, 3, 5, 8, 9, 16, 17, 31, 64, 100, 200, 249, 256}) {
                if (offset + n > all) continue;
                const std::vector<float> part = gpu_matmul(type, w_dev, rows, cols, x_dev.get() + offset * cols, n);
                ASSERT_TRUE(
                    gpu_test::same_bits(part.data(), full.data() + offset * rows, static_cast<size_t>(n * rows)))
                    << "batch of " << n << " rows from row " << offset;
            }
        }
    }
}

TEST(GpuMatmul, RefusesColumnsThatAreNotWholeBlocks) {
    KVSTASH_REQUIRE_GPU();
    cuda::MatmulArgs a;
    a.type = TensorType::Q4_K;
    a.rows = 4;
    a.cols = 128;  // half a super-block
    a.x_stride = 128;
    a.y_stride = 4;
    a.n_tokens = 1;
    EXPECT_EQ(cudaErrorInvalidValue, cuda::matmul(a, nullptr));
    a.type = TensorType::F32;
    EXPECT_EQ(cudaErrorInvalidValue, cuda::matmul(a, nullptr));
}

TEST(GpuLogits, GatheredRowsTimesTheOutputMatrix) {
    KVSTASH_REQUIRE_GPU();
    const int64_t vocab = 100, cols = 256, n_hidden = 6;
    const std::vector<float> h = gpu_test::random_floats(static_cast<size_t>(n_hidden * cols), -1.0f, 1.0f, 8);
    const std::vector<int32_t> rows = {5, 0, 2};
    const std::vector<uint8_t> w = gpu_test::random_weights(TensorType::Q8_0, vocab, cols, 41);
    DeviceBuffer<float> h_dev(h);
    DeviceBuffer<int32_t> rows_dev(rows);
    DeviceBuffer<uint8_t> w_dev(w);
    DeviceBuffer<float> gathered(rows.size() * cols);
    DeviceBuffer<float> out(rows.size() * vocab);
    KVSTASH_CUDA_OK(cuda::logits(TensorType::Q8_0, w_dev.get(), vocab, cols, h_dev.get(), cols, rows_dev.get(), 3,
                                 gathered.get(), out.get(), nullptr));
    KVSTASH_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> x;
    for (int32_t r : rows) x.insert(x.end(), h.begin() + r * cols, h.begin() + (r + 1) * cols);
    expect_close_to_reference(TensorType::Q8_0, w, vocab, cols, x, 3, out.download());
    // The same rows through matmul directly: the same bits (logits is a gather, then the one matmul).
    DeviceBuffer<float> x_dev(x);
    const std::vector<float> direct = gpu_matmul(TensorType::Q8_0, w_dev, vocab, cols, x_dev.get(), 3);
    EXPECT_EQ(-1, gpu_test::first_difference(out.download(), direct));
}

}  // namespace
}  // namespace kvstash
