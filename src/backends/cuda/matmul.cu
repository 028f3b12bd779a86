// Dequantizing matmul, embedding lookup (dequantize_rows) and logits (cuda_ops.cuh).
//
// Reduction order of Y[t][r] (the same for every t, whatever n_tokens or the tile it falls in):
//   lane l of the warp that owns row r sums the 32-element chunks c = l, l + 32, l + 64, ... of the row in
//   increasing c, each chunk's elements 32c .. 32c + 31 in increasing order, acc = fma(w, x, acc) from +0
//   (one rounding per step); then the 32 lane sums are combined by an xor butterfly with offsets 16, 8, 4,
//   2, 1 (every lane adds its partner's value; IEEE addition commutes, so all lanes hold the same sum).
// A warp computes one weight row for a tile of kTokenTile tokens, each token with its own accumulator: the
// tile only shares the decoded weights, never an addition. Not a tensor-core path: a bf16 mma / wgmma
// prefill path with a pinned tile shape is future work (docs/cuda.md). Not yet run on a GPU.
#include <cuda_bf16.h>

#include "backends/cuda/cuda_ops.cuh"
#include "backends/cuda/dequant.cuh"

namespace kvstash::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;  // weight rows per block
constexpr int kTokenTile = 8;      // tokens per block

template <Activations A>
__device__ __forceinline__ float load_x(const void* X, int64_t i) {
    if constexpr (A == Activations::f32) {
        return static_cast<const float*>(X)[i];
    } else {
        return device::bf16_to_fp32(static_cast<const uint16_t*>(X)[i]);
    }
}

template <TensorType Type, Activations A>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    matmul_kernel(const uint8_t* W, int64_t row_bytes, int64_t rows, int64_t cols, const void* X, int64_t x_stride,
                  int64_t n_tokens, float* Y, int64_t y_stride) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokenTile;
    if (r >= rows) return;  // the whole warp leaves together
    const uint8_t* w_row = W + r * row_bytes;
    const int64_t n_chunks = cols / device::kChunk;
    float acc[kTokenTile];
#pragma unroll
    for (int j = 0; j < kTokenTile; ++j) acc[j] = 0.0f;
    for (int64_t c = lane; c < n_chunks; c += 32) {
        float w[device::kChunk];
        device::dequantize_chunk<Type>(w_row, c, w);
#pragma unroll
        for (int j = 0; j < kTokenTile; ++j) {
            if (t0 + j < n_tokens) {
                const int64_t base = (t0 + j) * x_stride + c * device::kChunk;
#pragma unroll
                for (int e = 0; e < device::kChunk; ++e) acc[j] = __fmaf_rn(w[e], load_x<A>(X, base + e), acc[j]);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < kTokenTile; ++j) {
#pragma unroll
        for (int offset = 16; offset >= 1; offset /= 2) {
            acc[j] = __fadd_rn(acc[j], __shfl_xor_sync(0xFFFFFFFFu, acc[j], offset));
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int j = 0; j < kTokenTile; ++j) {
            if (t0 + j < n_tokens) Y[(t0 + j) * y_stride + r] = acc[j];
        }
    }
}

template <TensorType Type>
cudaError_t launch_matmul(const MatmulArgs& a, cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>((a.rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
                    static_cast<unsigned>((a.n_tokens + kTokenTile - 1) / kTokenTile));
    const auto* W = static_cast<const uint8_t*>(a.W);
    const int64_t row_bytes = device::row_bytes_of(Type, a.cols);
    if (a.x_type == Activations::f32) {
        matmul_kernel<Type, Activations::f32><<<grid, kWarpsPerBlock * 32, 0, stream>>>(
            W, row_bytes, a.rows, a.cols, a.X, a.x_stride, a.n_tokens, a.Y, a.y_stride);
    } else {
        matmul_kernel<Type, Activations::bf16><<<grid, kWarpsPerBlock * 32, 0, stream>>>(
            W, row_bytes, a.rows, a.cols, a.X, a.x_stride, a.n_tokens, a.Y, a.y_stride);
    }
    return cudaGetLastError();
}

// One thread per (id, chunk): 32 decoded values.
template <TensorType Type>
__global__ void dequantize_rows_kernel(const uint8_t* W, int64_t row_bytes, int64_t cols, const int32_t* ids,
                                       int64_t n_ids, float* out, float scale) {
    const int64_t n_chunks = cols / device::kChunk;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_ids * n_chunks) return;
    const int64_t row = i / n_chunks;
    const int64_t c = i % n_chunks;
    float v[device::kChunk];
    device::dequantize_chunk<Type>(W + static_cast<int64_t>(ids[row]) * row_bytes, c, v);
    float* dst = out + row * cols + c * device::kChunk;
#pragma unroll
    for (int e = 0; e < device::kChunk; ++e) dst[e] = scale == 1.0f ? v[e] : __fmul_rn(v[e], scale);
}

template <TensorType Type>
cudaError_t launch_dequantize(const void* W, int64_t cols, const int32_t* ids, int64_t n_ids, float* out,
                              cudaStream_t stream, float scale) {
    const int64_t n = n_ids * (cols / device::kChunk);
    const int threads = 128;
    dequantize_rows_kernel<Type><<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(
        static_cast<const uint8_t*>(W), device::row_bytes_of(Type, cols), cols, ids, n_ids, out, scale);
    return cudaGetLastError();
}

// Calls f.template operator()<Type>() for a supported type; cudaErrorInvalidValue otherwise.
template <typename F>
cudaError_t with_type(TensorType type, F&& f) {
    switch (type) {
        case TensorType::BF16: return f.template operator()<TensorType::BF16>();
        case TensorType::F16: return f.template operator()<TensorType::F16>();
        case TensorType::Q8_0: return f.template operator()<TensorType::Q8_0>();
        case TensorType::Q4_0: return f.template operator()<TensorType::Q4_0>();
        case TensorType::Q4_1: return f.template operator()<TensorType::Q4_1>();
        case TensorType::Q4_K: return f.template operator()<TensorType::Q4_K>();
        case TensorType::Q5_K: return f.template operator()<TensorType::Q5_K>();
        case TensorType::Q6_K: return f.template operator()<TensorType::Q6_K>();
        default: return cudaErrorInvalidValue;
    }
}

int64_t block_elements(TensorType type) {
    return type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K ? 256 : 32;
}

__global__ void gather_rows_kernel(const float* H, int64_t h_stride, const int32_t* rows, int64_t n, int64_t cols,
                                   float* out) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n * cols) return;
    out[i] = H[static_cast<int64_t>(rows[i / cols]) * h_stride + i % cols];
}

}  // namespace

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no driver / no device" error
        return 0;
    }
    return n;
}

bool supports_weight_type(TensorType type) {
    switch (type) {
        case TensorType::BF16:
        case TensorType::F16:
        case TensorType::Q8_0:
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K: return true;
        default: return false;
    }
}

cudaError_t matmul(const MatmulArgs& a, cudaStream_t stream) {
    if (!supports_weight_type(a.type) || a.rows < 0 || a.cols <= 0 || a.cols % block_elements(a.type) != 0 ||
        a.n_tokens < 0 || a.x_stride < a.cols || a.y_stride < a.rows || a.n_tokens > 65535LL * kTokenTile) {
        return cudaErrorInvalidValue;
    }
    if (a.rows == 0 || a.n_tokens == 0) return cudaSuccess;
    return with_type(a.type, [&]<TensorType T>() { return launch_matmul<T>(a, stream); });
}

cudaError_t dequantize_rows(TensorType type, const void* W, int64_t cols, const int32_t* ids, int64_t n_ids, float* out,
                            cudaStream_t stream, float scale) {
    if (!supports_weight_type(type) || cols <= 0 || cols % block_elements(type) != 0 || n_ids < 0) {
        return cudaErrorInvalidValue;
    }
    if (n_ids == 0) return cudaSuccess;
    return with_type(type,
                     [&]<TensorType T>() { return launch_dequantize<T>(W, cols, ids, n_ids, out, stream, scale); });
}

cudaError_t logits(TensorType type, const void* W_out, int64_t vocab, int64_t cols, const float* H, int64_t h_stride,
                   const int32_t* rows, int64_t n, float* gathered, float* out, cudaStream_t stream) {
    if (n < 0 || cols <= 0 || h_stride < cols) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    const int threads = 256;
    gather_rows_kernel<<<static_cast<unsigned>((n * cols + threads - 1) / threads), threads, 0, stream>>>(
        H, h_stride, rows, n, cols, gathered);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    MatmulArgs a;
    a.type = type;
    a.W = W_out;
    a.rows = vocab;
    a.cols = cols;
    a.X = gathered;
    a.x_stride = cols;
    a.n_tokens = n;
    a.Y = out;
    a.y_stride = vocab;
    return matmul(a, stream);
}

}  // namespace kvstash::cuda
