// The forward pass's additions (cuda_ops.cuh): the residual add (x += y * scale, the product rounded before
// the add; scale 1: a plain add) and the bias add (y[r][i] += bias[i]), one thread per element: bitwise the
// CPU backend's loops. Not yet run on a GPU.
#include "backends/cuda/cuda_ops.cuh"

namespace kvstash::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_residual_kernel(float* x, const float* y, int64_t n, float scale, bool scaled) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    x[i] = __fadd_rn(x[i], scaled ? __fmul_rn(y[i], scale) : y[i]);
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t rows, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * n) return;
    y[i] = __fadd_rn(y[i], bias[i % n]);
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t add_residual(float* x, const float* y, int64_t n, float scale, cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    add_residual_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n, scale, scale != 1.0f);
    return cudaGetLastError();
}

cudaError_t add_bias(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t stream) {
    if (rows < 0 || n < 0) return cudaErrorInvalidValue;
    if (rows == 0 || n == 0) return cudaSuccess;
    add_bias_kernel<<<blocks_for(rows * n), kThreads, 0, stream>>>(y, bias, rows, n);
    return cudaGetLastError();
}

}  // namespace kvstash::cuda
