// RMSNorm (cuda_ops.cuh), backends/cpu/norm/norm.h's arithmetic on the device, so bitwise the CPU's on every ISA:
//   acc[k] = sum over i ≡ k (mod 16), in increasing i, from +0, of double(x[i])²   (thread k, k = 0..15;
//            the square is exact in double, each addition rounds once: __dadd_rn, never a fused dfma)
//   s8[k] = acc[k] + acc[k+8]; s4[k] = s8[k] + s8[k+4]; s2[k] = s4[k] + s4[k+2]; sum = s2[0] + s2[1]
//   mean = float(sum / n); scale = 1.0f / sqrtf(mean + eps); out[i] = weight[i] * (x[i] * scale)
// One block per row; the row's result depends on that row alone. Not yet run on a GPU.
#include "backends/cuda/cuda_ops.cuh"

namespace kvstash::cuda {
namespace {

constexpr int kLanes = 16;  // kernels::kRmsNormLanes
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const float* x, const float* weight, float* out, int64_t n, int64_t stride, float eps) {
    __shared__ double acc[kLanes];
    __shared__ float scale;
    const float* row = x + static_cast<int64_t>(blockIdx.x) * stride;
    float* out_row = out + static_cast<int64_t>(blockIdx.x) * stride;
    if (threadIdx.x < kLanes) {
        double a = 0.0;
        for (int64_t i = threadIdx.x; i < n; i += kLanes) {
            const auto xi = static_cast<double>(row[i]);
            a = __dadd_rn(a, __dmul_rn(xi, xi));
        }
        acc[threadIdx.x] = a;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double s[kLanes];
        for (int k = 0; k < kLanes; ++k) s[k] = acc[k];
        for (int width = kLanes / 2; width >= 1; width /= 2) {
            for (int k = 0; k < width; ++k) s[k] = __dadd_rn(s[k], s[k + width]);
        }
        const float mean = __double2float_rn(__ddiv_rn(s[0], static_cast<double>(n)));
        scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kThreads) out_row[i] = __fmul_rn(weight[i], __fmul_rn(row[i], scale));
}

}  // namespace

cudaError_t rms_norm(const float* x, const float* weight, float* out, int64_t n_rows, int64_t n, int64_t stride,
                     float eps, cudaStream_t stream) {
    if (n_rows < 0 || n <= 0 || stride < n || n_rows > 0x7FFFFFFF) return cudaErrorInvalidValue;
    if (n_rows == 0) return cudaSuccess;
    rms_norm_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(x, weight, out, n, stride, eps);
    return cudaGetLastError();
}

}  // namespace kvstash::cuda
