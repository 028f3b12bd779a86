// K/V rows into f16 cache blocks (cuda_ops.cuh): one thread per element, rounded by fp32_to_fp16 (the CPU's
// conversion, bit for bit, NaN payloads included). Each element's bits depend on its own value alone.
// Not yet run on a GPU.
#include "backends/cuda/cuda_ops.cuh"
#include "backends/cuda/device_numerics.cuh"

namespace kvstash::cuda {
namespace {

__global__ void kv_store_kernel(const KvBlocks* views, const int32_t* row_view, const int64_t* positions,
                                const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t n_rows,
                                int64_t row_elems) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_rows * row_elems) return;
    const int64_t t = i / row_elems;
    const int64_t e = i % row_elems;
    const KvBlocks& view = views[row_view[t]];
    const int64_t pos = positions[t];
    const int64_t offset = (pos % view.block_tokens) * view.row_elems + e;
    view.k_blocks[pos / view.block_tokens][offset] = device::fp32_to_fp16(k[t * k_stride + e]);
    view.v_blocks[pos / view.block_tokens][offset] = device::fp32_to_fp16(v[t * v_stride + e]);
}

}  // namespace

cudaError_t kv_store(const KvBlocks* views, const int32_t* row_view, const int64_t* positions, const float* k,
                     int64_t k_stride, const float* v, int64_t v_stride, int64_t n_rows, int64_t row_elems,
                     cudaStream_t stream) {
    if (n_rows < 0 || row_elems < 0 || k_stride < row_elems || v_stride < row_elems) return cudaErrorInvalidValue;
    if (n_rows == 0 || row_elems == 0) return cudaSuccess;
    const int threads = 256;
    kv_store_kernel<<<static_cast<unsigned>((n_rows * row_elems + threads - 1) / threads), threads, 0, stream>>>(
        views, row_view, positions, k, k_stride, v, v_stride, n_rows, row_elems);
    return cudaGetLastError();
}

}  // namespace kvstash::cuda
