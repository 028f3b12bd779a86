// K/V rows into cache blocks (cuda_ops.cuh): f16 and f32 one thread per element (fp32_to_fp16: the CPU's
// conversion, bit for bit, NaN payloads included), q8_0 one thread per 32-value block (kv_codec.cuh, the
// CPU's quantize_row_q8_0). Each element's or block's bytes depend on its own values alone.
// Not yet run on a GPU.
#include "backends/cuda/cuda_ops.cuh"
#include "backends/cuda/kv_codec.cuh"

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
    const int64_t at = (pos % view.block_tokens) * view.row_bytes;
    uint8_t* k_row = view.k_blocks[pos / view.block_tokens] + at;
    uint8_t* v_row = view.v_blocks[pos / view.block_tokens] + at;
    const float* k_src = k + t * k_stride;
    const float* v_src = v + t * v_stride;
    if (view.type == TensorType::F16) {
        reinterpret_cast<uint16_t*>(k_row)[e] = device::fp32_to_fp16(k_src[e]);
        reinterpret_cast<uint16_t*>(v_row)[e] = device::fp32_to_fp16(v_src[e]);
    } else if (view.type == TensorType::F32) {
        reinterpret_cast<float*>(k_row)[e] = k_src[e];
        reinterpret_cast<float*>(v_row)[e] = v_src[e];
    } else if (e % device::kQ8Block == 0) {  // Q8_0: the block's first element's thread writes the block
        device::quantize_block_q8_0(k_src + e, k_row + device::kv_offset(TensorType::Q8_0, e));
        device::quantize_block_q8_0(v_src + e, v_row + device::kv_offset(TensorType::Q8_0, e));
    }
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
