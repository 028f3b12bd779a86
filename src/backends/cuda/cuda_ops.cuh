// The CUDA backend's operations, callable from host C++ (no device code in this header): each takes device
// pointers and a stream, enqueues its kernels and returns the launch status (cudaSuccess, or the error of
// an argument check / launch; nothing is synchronised). These are the device-side halves of the ops of the
// backend seam (issue 28: embed, norm, project, rope, kv store, attention, FFN, logits); wiring them into
// the forward pass is the next step (docs/cuda.md).
//
// Batch invariance, by construction: every output element is computed by one thread or one warp with one
// reduction order that depends on its own inputs only (never on the number of rows in the call, the grid,
// or which other rows share a tile), with no atomics and no split of a reduction across blocks that depends
// on the batch. Each kernel's comment states its order. Nothing here has run on a GPU yet: the GPU tests
// (tests/gpu, scripts/gpu_check.sh) are written and compiled, waiting for a GPU session.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "format/tensor_type.h"
#include "backends/cpu/rope/rope_params.h"

namespace kvstash::cuda {

// Number of usable CUDA devices; 0 when there is no driver, no device, or the runtime fails (never throws).
int device_count();

// Whether matmul / dequantize_rows take weights of `type` (BF16, F16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K).
bool supports_weight_type(TensorType type);

enum class Activations { f32, bf16 };

// Y[t][r] = sum_k W[r][k] * X[t][k]: W rows × cols in its GGUF layout (row r at W + r * row_bytes, row_bytes
// from tensor_row_bytes), dequantized inside the kernel; X n_tokens × cols (row stride x_stride elements);
// Y n_tokens × rows (row stride y_stride floats). cols a multiple of 32 (256 for the K-quants).
struct MatmulArgs {
    TensorType type = TensorType::F16;
    const void* W = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    const void* X = nullptr;
    Activations x_type = Activations::f32;
    int64_t x_stride = 0;
    int64_t n_tokens = 0;
    float* Y = nullptr;
    int64_t y_stride = 0;
};
cudaError_t matmul(const MatmulArgs& args, cudaStream_t stream);

// out[i] = row ids[i] of W (rows of `cols` elements of `type`) dequantized to f32, bitwise the CPU's
// dequantize_row, then each value × scale (rounded; skipped when scale is 1), as the CPU backend's embed:
// the embedding lookup (ids = token ids, scale = embedding_scale), and a test of the block decoders.
cudaError_t dequantize_rows(TensorType type, const void* W, int64_t cols, const int32_t* ids, int64_t n_ids, float* out,
                            cudaStream_t stream, float scale = 1.0f);

// RMSNorm of n_rows rows of n floats (row stride `stride` for x and out): out = weight * (x * scale),
// bitwise the CPU's rms_norm_row (backends/cpu/norm/norm.h). out may equal x.
cudaError_t rms_norm(const float* x, const float* weight, float* out, int64_t n_rows, int64_t n, int64_t stride,
                     float eps, cudaStream_t stream);

// cos/sin tables of n_positions positions × (n_rot / 2) angles, bitwise RopeTable::angles except where the
// device's double cos/sin (≤ 2 ulp in double) rounds to another float than the host's libm: the angle is
// float(pos * position_scale) * inv_freq[i] (inv_freq with Llama 3.1's freq factors already divided in, as
// RopeTable holds it), cos/sin in double, rounded to float. Callers who need the host's bits copy the host's
// table instead; rope_rotate takes either.
cudaError_t rope_angles(const int64_t* positions, int64_t n_positions, const float* inv_freq, int64_t half,
                        float position_scale, float* cos_out, float* sin_out, cudaStream_t stream);

// Rotates the first 2 * half dims of each of n_heads heads (head_dim floats each, heads consecutive, row
// stride `stride`) of n_rows rows in place with row t's cos/sin (cos_v + t * half): bitwise
// kernels::reference::rope_rotate (normal: pairs (2i, 2i+1); neox: (i, i + half)).
cudaError_t rope_rotate(RopeLayout layout, float* x, int64_t n_rows, int64_t stride, int64_t n_heads, int64_t head_dim,
                        int64_t half, const float* cos_v, const float* sin_v, cudaStream_t stream);

// out[i] = silu(gate[i]) * up[i] over n_rows rows of n (row strides in elements), bitwise kernels::swiglu.
cudaError_t swiglu(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
                   int64_t out_stride, int64_t n_rows, int64_t n, cudaStream_t stream);

// x[i] += y[i] * scale for i < n (the product rounded first; scale 1: a plain add), and y[r][i] += bias[i]
// over rows × n: bitwise the CPU backend's add_residual / add_bias.
cudaError_t add_residual(float* x, const float* y, int64_t n, float scale, cudaStream_t stream);
cudaError_t add_bias(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t stream);

// One layer's KV cache on the device: blocks of block_tokens token rows of `type` (F16, F32 or Q8_0, as
// kvstash::KvType; Q8_0 needs head_dim a multiple of 32), each row n_head_kv * head_dim elements in row_bytes
// bytes; position j's key row at k_blocks[j / block_tokens] + (j % block_tokens) * row_bytes (values alike).
// The pointer tables themselves live in device memory.
struct KvBlocks {
    uint8_t* const* k_blocks = nullptr;
    uint8_t* const* v_blocks = nullptr;
    int64_t block_tokens = 32;
    int64_t row_bytes = 0;
    TensorType type = TensorType::F16;
};

// Stores n_rows rows of K and V (f32, row_elems each, row strides k_stride / v_stride) at positions[t] of
// views[row_view[t]] in the view's type, each row converted from itself alone, bitwise as the CPU does:
// fp32_to_fp16 (src/format/tensor_type.cpp), or quantize_row_q8_0 (src/format/quantize.cpp). views, row_view
// and positions are device arrays.
cudaError_t kv_store(const KvBlocks* views, const int32_t* row_view, const int64_t* positions, const float* k,
                     int64_t k_stride, const float* v, int64_t v_stride, int64_t n_rows, int64_t row_elems,
                     cudaStream_t stream);

struct AttentionShape {
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;  // at most 256
    float scale = 1.0f;
    int64_t window = 0;  // sliding window (0: none), as backends/cpu/attention/attention.h
};

// Causal GQA attention of n_rows query rows, row r at absolute position host_row_pos[r] of
// views[row_view[r]]: q / out n_rows × (n_head * head_dim) f32. Each (row, head) is computed in 256-key
// chunks at absolute positions, then combined in chunk order: backends/cpu/attention/attention.h's definition, with the
// scalar reference's per-row operations, so the output is bitwise the CPU's scalar path
// (attention_per_row_with(Isa::scalar)). row_pos / row_view: device arrays; host_row_pos: the same positions
// on the host (they size the work). workspace: device memory of attention_workspace_bytes(...) bytes.
size_t attention_workspace_bytes(const AttentionShape& shape, const int64_t* host_row_pos, int64_t n_rows);
cudaError_t attention(const AttentionShape& shape, const KvBlocks* views, const int32_t* row_view,
                      const int64_t* row_pos, const int64_t* host_row_pos, int64_t n_rows, const float* q, float* out,
                      void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Logits: rows `rows[i]` of the hidden states H (row stride h_stride floats) gathered into `gathered`
// (n × cols, contiguous), then multiplied by the output matrix (matmul, vocab rows): logits n × vocab.
cudaError_t logits(TensorType type, const void* W_out, int64_t vocab, int64_t cols, const float* H, int64_t h_stride,
                   const int32_t* rows, int64_t n, float* gathered, float* out, cudaStream_t stream);

}  // namespace kvstash::cuda
