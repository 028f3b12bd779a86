// RoPE on the device (cuda_ops.cuh). Each pair is rotated as backends/cpu/rope/rope_rotate.h states, the two products
// rounded before the add or subtract (__fmul_rn, never fused), so the bits are the scalar reference's; one
// thread per (row, head, pair), which depends on that pair's values and its row's angles only.
// Not yet run on a GPU.
#include "backends/cuda/cuda_ops.cuh"

namespace kvstash::cuda {
namespace {

__global__ void rope_angles_kernel(const int64_t* positions, int64_t n_positions, const float* inv_freq, int64_t half,
                                   float position_scale, float* cos_out, float* sin_out) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_positions * half) return;
    const int64_t t = i / half;
    const int64_t k = i % half;
    // RopeTable::angles: p = float(pos) * position_scale; angle = double(p * inv_freq[k]).
    const float p = __fmul_rn(static_cast<float>(positions[t]), position_scale);
    const auto angle = static_cast<double>(__fmul_rn(p, inv_freq[k]));
    double s = 0.0, c = 0.0;
    sincos(angle, &s, &c);
    cos_out[i] = __double2float_rn(c);
    sin_out[i] = __double2float_rn(s);
}

__global__ void rope_rotate_kernel(RopeLayout layout, float* x, int64_t n_rows, int64_t stride, int64_t n_heads,
                                   int64_t head_dim, int64_t half, const float* cos_v, const float* sin_v) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_rows * n_heads * half) return;
    const int64_t t = i / (n_heads * half);
    const int64_t h = (i / half) % n_heads;
    const int64_t k = i % half;
    float* v = x + t * stride + h * head_dim;
    const int64_t a = layout == RopeLayout::normal ? 2 * k : k;
    const int64_t b = layout == RopeLayout::normal ? 2 * k + 1 : k + half;
    const float c = cos_v[t * half + k];
    const float s = sin_v[t * half + k];
    const float x0 = v[a];
    const float x1 = v[b];
    v[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    v[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t rope_angles(const int64_t* positions, int64_t n_positions, const float* inv_freq, int64_t half,
                        float position_scale, float* cos_out, float* sin_out, cudaStream_t stream) {
    if (n_positions < 0 || half < 0) return cudaErrorInvalidValue;
    if (n_positions == 0 || half == 0) return cudaSuccess;
    rope_angles_kernel<<<blocks_for(n_positions * half), kThreads, 0, stream>>>(positions, n_positions, inv_freq, half,
                                                                                position_scale, cos_out, sin_out);
    return cudaGetLastError();
}

cudaError_t rope_rotate(RopeLayout layout, float* x, int64_t n_rows, int64_t stride, int64_t n_heads, int64_t head_dim,
                        int64_t half, const float* cos_v, const float* sin_v, cudaStream_t stream) {
    if (n_rows < 0 || n_heads < 0 || half < 0 || 2 * half > head_dim || stride < n_heads * head_dim) {
        return cudaErrorInvalidValue;
    }
    if (n_rows == 0 || n_heads == 0 || half == 0) return cudaSuccess;
    rope_rotate_kernel<<<blocks_for(n_rows * n_heads * half), kThreads, 0, stream>>>(layout, x, n_rows, stride, n_heads,
                                                                                     head_dim, half, cos_v, sin_v);
    return cudaGetLastError();
}

}  // namespace kvstash::cuda
