// Causal GQA attention over KV blocks of f16, f32 or q8_0 (cuda_ops.cuh): backends/cpu/attention/attention.h's definition on the
// device.
//
// Order, for query row r at absolute position p, head h (KV head h / (n_head / n_head_kv)):
//   chunks c = first_key(p) / 256 .. p / 256, chunk c = keys [max(first_key, 256c), min(p, 256c + 255)];
//   per chunk (one block of 256 threads, one work item):
//     score_j = dot(q, k_j) * scale, dot = 16 lanes (d mod 16) of fma chains in increasing d from +0, then
//               the canonical tree (docs/architecture/canonical-float-ops.md)              (thread j: key j)
//     max = running max over j in key order from -inf (thread 0)
//     e_j = exp_f32(score_j - max)                                                        (thread j)
//     sum = sum over j in key order, from +0, of e_j                                      (thread 0)
//     acc[d] = fma(e_j, v_j[d], acc[d]) over j in key order, from +0                      (thread d)
//   combined per (row, head) in chunk order (one thread per d): M = running max of the chunk maxima,
//   f_k = exp_f32(max_k - M), l = sum_k sum_k * f_k, o[d] = sum_k acc_k[d] * f_k (both from +0, in chunk
//   order), out[d] = o[d] * (1 / l).
// Every product and sum is rounded on its own, fma only in the dot and the axpy: the scalar CPU path's operations
// (backends/cpu/attention/reference/attention_rows_ref.cpp, backends/cpu/attention/attention.cpp combine_partials), so the output is
// bitwise attention_per_row_with(Isa::scalar). Nothing depends on the other rows of the call, on n_rows or
// on the grid. Correctness first: a thread per key reads K rows strided, and one thread sums 256 values
// in order; a faster kernel must keep these orders (or define and pin new ones). Not yet run on a GPU.
#include <vector>

#include "backends/cuda/cuda_ops.cuh"
#include "backends/cuda/kv_codec.cuh"

namespace kvstash::cuda {
namespace {

constexpr int64_t kChunkKeys = 256;  // kvstash::kAttentionChunkKeys (backends/cpu/attention/attention.h)
constexpr int kThreads = 256;        // one per key of a chunk; also >= head_dim
constexpr int kDotLanes = 16;        // kvstash::kAttentionDotLanes: the canonical dot product's lanes

struct WorkItem {
    int32_t row;
    int32_t chunk;
};

int64_t first_key(const AttentionShape& s, int64_t pos) {
    return s.window > 0 && pos >= s.window ? pos - s.window + 1 : 0;
}

__device__ int64_t device_first_key(int64_t window, int64_t pos) {
    return window > 0 && pos >= window ? pos - window + 1 : 0;
}

int64_t partial_floats(const AttentionShape& s) { return s.head_dim + 2; }  // [max, sum, acc (head_dim)]

__global__ void __launch_bounds__(kThreads)
    chunk_partials_kernel(AttentionShape s, const KvBlocks* views, const int32_t* row_view, const int64_t* row_pos,
                          const WorkItem* work, const float* q, float* partials) {
    __shared__ float q_head[kThreads];
    __shared__ float scores[kChunkKeys];
    __shared__ float chunk_max;
    __shared__ float chunk_sum;
    const WorkItem item = work[blockIdx.x];
    const int64_t h = blockIdx.y;
    const int64_t kv_head = h / (s.n_head / s.n_head_kv);
    const int64_t pos = row_pos[item.row];
    const KvBlocks& view = views[row_view[item.row]];
    const int64_t lo = max(device_first_key(s.window, pos), item.chunk * kChunkKeys);
    const int64_t hi = min(pos, item.chunk * kChunkKeys + kChunkKeys - 1);
    const int64_t n_keys = hi + 1 - lo;
    const float* q_row = q + static_cast<int64_t>(item.row) * s.n_head * s.head_dim + h * s.head_dim;
    if (threadIdx.x < s.head_dim) q_head[threadIdx.x] = q_row[threadIdx.x];
    __syncthreads();
    const int64_t j = threadIdx.x;
    if (j < n_keys) {
        const int64_t key = lo + j;
        const uint8_t* k_row = view.k_blocks[key / view.block_tokens] + (key % view.block_tokens) * view.row_bytes +
                               device::kv_offset(view.type, kv_head * s.head_dim);
        // The canonical dot product (docs/architecture/canonical-float-ops.md): element d in lane d mod 16,
        // each lane an fma chain in increasing d from +0, then the canonical tree.
        float lane[kDotLanes];
#pragma unroll
        for (int l = 0; l < kDotLanes; ++l) lane[l] = 0.0f;
        for (int64_t d0 = 0; d0 < s.head_dim; d0 += kDotLanes) {
#pragma unroll
            for (int l = 0; l < kDotLanes; ++l) {
                if (d0 + l < s.head_dim) {
                    lane[l] = __fmaf_rn(q_head[d0 + l], device::kv_load(k_row, d0 + l, view.type), lane[l]);
                }
            }
        }
#pragma unroll
        for (int width = kDotLanes / 2; width >= 1; width /= 2) {
#pragma unroll
            for (int l = 0; l < width; ++l) lane[l] = __fadd_rn(lane[l], lane[l + width]);
        }
        scores[j] = __fmul_rn(lane[0], s.scale);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = -INFINITY;
        for (int64_t i = 0; i < n_keys; ++i) {
            if (scores[i] > m) m = scores[i];
        }
        chunk_max = m;
    }
    __syncthreads();
    if (j < n_keys) scores[j] = device::exp_f32(__fsub_rn(scores[j], chunk_max));
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int64_t i = 0; i < n_keys; ++i) sum = __fadd_rn(sum, scores[i]);
        chunk_sum = sum;
    }
    float* partial = partials + (static_cast<int64_t>(blockIdx.x) * s.n_head + h) * (s.head_dim + 2);
    if (threadIdx.x < s.head_dim) {
        const int64_t d = threadIdx.x;
        float acc = 0.0f;
        for (int64_t i = 0; i < n_keys; ++i) {
            const int64_t key = lo + i;
            const uint8_t* v_row = view.v_blocks[key / view.block_tokens] + (key % view.block_tokens) * view.row_bytes +
                                   device::kv_offset(view.type, kv_head * s.head_dim);
            acc = __fmaf_rn(scores[i], device::kv_load(v_row, d, view.type), acc);  // the canonical axpy
        }
        partial[2 + d] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        partial[0] = chunk_max;
        partial[1] = chunk_sum;
    }
}

// One block per (row, head), one thread per output dimension.
__global__ void combine_kernel(AttentionShape s, const int32_t* row_first_work, const float* partials, float* out) {
    const int64_t r = blockIdx.x;
    const int64_t h = blockIdx.y;
    const int64_t d = threadIdx.x;
    if (d >= s.head_dim) return;
    const int64_t w0 = row_first_work[r];
    const int64_t n_chunks = row_first_work[r + 1] - w0;
    const int64_t stride = s.n_head * (s.head_dim + 2);
    const float* first = partials + w0 * stride + h * (s.head_dim + 2);
    float m = first[0];
    for (int64_t k = 1; k < n_chunks; ++k) {
        const float mk = first[k * stride];
        m = m < mk ? mk : m;  // std::max(m, mk)
    }
    float l = 0.0f;
    float o = 0.0f;
    for (int64_t k = 0; k < n_chunks; ++k) {
        const float* p = first + k * stride;
        const float f = device::exp_f32(__fsub_rn(p[0], m));
        l = __fadd_rn(l, __fmul_rn(p[1], f));
        o = __fadd_rn(o, __fmul_rn(p[2 + d], f));
    }
    out[r * s.n_head * s.head_dim + h * s.head_dim + d] = __fmul_rn(o, __fdiv_rn(1.0f, l));
}

bool valid_shape(const AttentionShape& s) {
    return s.n_head > 0 && s.n_head_kv > 0 && s.n_head % s.n_head_kv == 0 && s.head_dim > 0 && s.head_dim <= kThreads &&
           s.n_head <= 65535 && s.window >= 0;
}

// Work items of all rows, row by row, chunks in order; row_first[r] = the first item of row r.
int64_t build_work(const AttentionShape& s, const int64_t* host_row_pos, int64_t n_rows, std::vector<WorkItem>* work,
                   std::vector<int32_t>* row_first) {
    int64_t n = 0;
    if (row_first != nullptr) row_first->assign(1, 0);
    for (int64_t r = 0; r < n_rows; ++r) {
        const int64_t pos = host_row_pos[r];
        const int64_t c0 = first_key(s, pos) / kChunkKeys;
        for (int64_t c = c0; c <= pos / kChunkKeys; ++c, ++n) {
            if (work != nullptr) work->push_back({static_cast<int32_t>(r), static_cast<int32_t>(c)});
        }
        if (row_first != nullptr) row_first->push_back(static_cast<int32_t>(n));
    }
    return n;
}

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

size_t attention_workspace_bytes(const AttentionShape& shape, const int64_t* host_row_pos, int64_t n_rows) {
    const auto n_work = static_cast<size_t>(build_work(shape, host_row_pos, n_rows, nullptr, nullptr));
    return align_up(n_work * static_cast<size_t>(shape.n_head * partial_floats(shape)) * sizeof(float)) +
           align_up(n_work * sizeof(WorkItem)) + align_up(static_cast<size_t>(n_rows + 1) * sizeof(int32_t));
}

cudaError_t attention(const AttentionShape& shape, const KvBlocks* views, const int32_t* row_view,
                      const int64_t* row_pos, const int64_t* host_row_pos, int64_t n_rows, const float* q, float* out,
                      void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (!valid_shape(shape) || n_rows < 0 || n_rows > 0x7FFFFFFF) return cudaErrorInvalidValue;
    for (int64_t r = 0; r < n_rows; ++r) {
        if (host_row_pos[r] < 0) return cudaErrorInvalidValue;
    }
    if (n_rows == 0) return cudaSuccess;
    if (workspace_bytes < attention_workspace_bytes(shape, host_row_pos, n_rows)) return cudaErrorInvalidValue;
    std::vector<WorkItem> work;
    std::vector<int32_t> row_first;
    const int64_t n_work = build_work(shape, host_row_pos, n_rows, &work, &row_first);
    if (n_work > 0x7FFFFFFF) return cudaErrorInvalidValue;
    auto* base = static_cast<char*>(workspace);
    auto* partials = reinterpret_cast<float*>(base);
    base += align_up(static_cast<size_t>(n_work * shape.n_head * partial_floats(shape)) * sizeof(float));
    auto* work_dev = reinterpret_cast<WorkItem*>(base);
    base += align_up(static_cast<size_t>(n_work) * sizeof(WorkItem));
    auto* row_first_dev = reinterpret_cast<int32_t*>(base);
    // From pageable host memory: staged before the call returns, so the vectors may go out of scope.
    cudaError_t e =
        cudaMemcpyAsync(work_dev, work.data(), work.size() * sizeof(WorkItem), cudaMemcpyHostToDevice, stream);
    if (e != cudaSuccess) return e;
    e = cudaMemcpyAsync(row_first_dev, row_first.data(), row_first.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                        stream);
    if (e != cudaSuccess) return e;
    chunk_partials_kernel<<<dim3(static_cast<unsigned>(n_work), static_cast<unsigned>(shape.n_head)), kThreads, 0,
                            stream>>>(shape, views, row_view, row_pos, work_dev, q, partials);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    combine_kernel<<<dim3(static_cast<unsigned>(n_rows), static_cast<unsigned>(shape.n_head)),
                     static_cast<unsigned>(shape.head_dim), 0, stream>>>(shape, row_first_dev, partials, out);
    return cudaGetLastError();
}

}  // namespace kvstash::cuda
