// SwiGLU on the device (cuda_ops.cuh): backends/cpu/activation/activation.h's sequence, one thread per element:
//   e = exp_f32(-g); d = 1 + e; s = g / d; out = s * up   (each step rounded on its own: bitwise the CPU's)
// Not yet run on a GPU.
#include "backends/cuda/cuda_ops.cuh"
#include "backends/cuda/device_numerics.cuh"

namespace kvstash::cuda {
namespace {

__global__ void swiglu_kernel(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
                              int64_t out_stride, int64_t n_rows, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_rows * n) return;
    const int64_t t = i / n;
    const int64_t k = i % n;
    const float g = gate[t * gate_stride + k];
    const float d = __fadd_rn(1.0f, device::exp_f32(-g));
    out[t * out_stride + k] = __fmul_rn(__fdiv_rn(g, d), up[t * up_stride + k]);
}

}  // namespace

cudaError_t swiglu(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
                   int64_t out_stride, int64_t n_rows, int64_t n, cudaStream_t stream) {
    if (n_rows < 0 || n < 0 || gate_stride < n || up_stride < n || out_stride < n) return cudaErrorInvalidValue;
    if (n_rows == 0 || n == 0) return cudaSuccess;
    const int threads = 256;
    swiglu_kernel<<<static_cast<unsigned>((n_rows * n + threads - 1) / threads), threads, 0, stream>>>(
        gate, gate_stride, up, up_stride, out, out_stride, n_rows, n);
    return cudaGetLastError();
}

}  // namespace kvstash::cuda
