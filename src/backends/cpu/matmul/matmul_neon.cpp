// matmul with f32 activations (f32, f16, bf16 weights) on aarch64 NEON: each weight row decoded once (dequantize_row,
// exact), then per token the canonical 16-lane dot product (reference/matmul_ref.cpp) over simd::F32x16: lane i
// accumulates fma(w[k], x[k], acc) for k ≡ i (mod 16), a partial last chunk's missing lanes +0, and the canonical
// tree (reduce_add). The scalar reference's bits (docs/architecture/canonical-matmul.md).
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/runtime/scratch.h"
#include "backends/cpu/simd/f32x16.h"

namespace kvstash::kernels {
namespace {

float canonical_dot(const float* w, const float* x, int64_t cols) {
    simd::F32x16 acc = simd::zero();
    int64_t k = 0;
    for (; k + simd::kLanes <= cols; k += simd::kLanes) acc = simd::fma(simd::load(w + k), simd::load(x + k), acc);
    if (k < cols) acc = simd::fma(simd::load_first(w + k, cols - k), simd::load_first(x + k, cols - k), acc);
    return simd::reduce_add(acc);
}

}  // namespace

void matmul_rows_neon(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    thread_local ScratchArray row_buf;
    float* w = row_buf.floats(static_cast<size_t>(a.cols));
    for (int64_t r = row_begin; r < row_end; ++r) {
        dequantize_row(a.type, a.W + static_cast<uint64_t>(r) * a.row_bytes, w, a.cols);
        for (int64_t t = 0; t < a.n_tokens; ++t) a.Y[t * a.y_stride + r] = canonical_dot(w, a.X + t * a.cols, a.cols);
    }
}

}  // namespace kvstash::kernels
