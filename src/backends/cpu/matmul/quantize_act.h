// Activations quantized to 16-bit integers, stored as two int8 planes, for the integer dot products of
// the quantized weight types.
//
// Why 16 bits in two planes. One int8 per activation (llama.cpp's q8_0 / q8_K) keeps 1/254 of a block's
// largest |x|: on SmolLM2-135M that moved logits by up to 1.8 (of 43) against the fp32 reference and
// changed greedy continuations after 3-31 tokens. A 16-bit value q = 256·h + l (h, l signed int8) keeps
// 1/65278 of the block maximum, and its dot product with integer weights is two int8 dot products
// (vpdpbusd on each plane), combined exactly: sum w·q = 256·sum w·h + sum w·l.
//
// Each activation row (one token) is quantized on its own, so the result depends on that row only
// (batch invariance). A row of `cols` f32 values is cut into blocks of `block` elements (32 for the
// 32-element weight types q4_0 / q4_1 / q8_0, 256 for the K-quants); each block gets one f32 scale
// d = max|x| / 32639 and integers q = round_half_even(x · 32639/max|x|), |q| <= 32639 = 127·256 + 127,
// split as l = ((q + 128) mod 256) - 128 in [-128, 127] and h = (q - l) / 256 in [-127, 127]. So
// |x - d·q| <= d/2 (up to the roundings of 32639/max|x| and of the product). Stored per row, in element
// order: h and l (cols int8 each), q itself as int16 (cols; the AVX2 kernels multiply it with
// vpmaddwd, exact: |w·q| <= 128·32639), d (cols / block f32), and the exact sums of h and of l over
// every 32 and every 16 elements (for the weight types' offsets and minimums).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/runtime/dispatch.h"
#include "format/tensor_type.h"

namespace kvstash {

class ThreadPool;

namespace kernels {

constexpr int32_t kActivationMax = 32639;  // largest |q|: 127 · 256 + 127

// True for the types with an integer-activation path (all block-quantized types, and q5_0: the only path that
// computes it, on the scalar and AVX2 kernels).
bool has_integer_path(TensorType type);
// True for the types whose matmul() multiplies integer activations, on every path (scalar, AVX2, AVX-512
// with and without VNNI): every type with an integer path. This is the canonical arithmetic of the
// block-quantized types (docs/architecture/canonical-matmul.md): integer sums are exact, so every ISA gives
// the scalar definition's bits. Chosen over f32 activations because it is the faster one on the paths that
// matter (docs/benchmarks-history.md): AVX2 (q8_0 1.0-1.8x, q4_0 / q4_1 1.6-2.6x per thread, K-quants prefill
// 1.4-1.6x, decode 1.1-1.9x) and AVX-512 VNNI (K-quants and q8_0 prefill 1.5-2.0x, decode q4_K / q6_K about
// 2x). q4_0 / q4_1 on AVX-512 VNNI, which kept f32 activations before (their VNNI decode was measured 10-15%
// slower per thread), measured faster end to end on SmolLM2 when they joined (docs/benchmarks-history.md,
// "Canonical matmul arithmetic (issue 32)").
bool uses_integer_activations(TensorType type);
// The activation block size for such a type: 32 (q4_0, q4_1, q5_0, q8_0) or 256 (q4_K, q5_K, q6_K).
int64_t activation_block(TensorType type);

struct QuantizedActivations {
    // Out of line (quantize_act.cpp) so that kernel files built for one instruction set, which keep
    // these per thread, do not emit the vectors' members as shared weak symbols (see scratch.h).
    QuantizedActivations();
    ~QuantizedActivations();
    QuantizedActivations(const QuantizedActivations&);
    QuantizedActivations& operator=(const QuantizedActivations&);
    QuantizedActivations(QuantizedActivations&&) noexcept;
    QuantizedActivations& operator=(QuantizedActivations&&) noexcept;

    int64_t n_tokens = 0, cols = 0, block = 0;
    std::vector<int8_t> h, l;       // n_tokens × cols each: the two planes, q = 256 h + l
    std::vector<int16_t> q;         // n_tokens × cols: 256 h + l (filled from h, l by quantize_activations)
    std::vector<float> d;           // n_tokens × (cols / block)
    std::vector<int32_t> h32, l32;  // n_tokens × (cols / 32): sums of h, of l over each 32 elements
    std::vector<int32_t> h16, l16;  // n_tokens × (cols / 16): the same over each 16 elements

    const int8_t* h_row(int64_t t) const { return h.data() + t * cols; }
    const int8_t* l_row(int64_t t) const { return l.data() + t * cols; }
    const int16_t* q_row(int64_t t) const { return q.data() + t * cols; }
    const float* d_row(int64_t t) const { return d.data() + t * (cols / block); }
    const int32_t* h32_row(int64_t t) const { return h32.data() + t * (cols / 32); }
    const int32_t* l32_row(int64_t t) const { return l32.data() + t * (cols / 32); }
    const int32_t* h16_row(int64_t t) const { return h16.data() + t * (cols / 16); }
    const int32_t* l16_row(int64_t t) const { return l16.data() + t * (cols / 16); }
};

// Quantizes one row (cols a multiple of block and of 32) into the planes h, l, the scales d and the
// sums. Scalar; every ISA uses this function, so the quantized activations are the same bits on every
// path.
namespace reference {
void quantize_activation_row(const float* x, int64_t cols, int64_t block, int8_t* h, int8_t* l, float* d, int32_t* h32,
                             int32_t* l32, int32_t* h16, int32_t* l16);
}  // namespace reference

// QuantizeRowFn (backends/cpu/runtime/dispatch.h): quantize_activation_row or an ISA's version of it with the same
// result bits.
// AVX-512 version (quantize_act_avx512.cpp): the same operations 16 lanes at a time (max and the
// integer steps are exact, the product and the rounding add are the same single roundings), so the
// same bits. Only on a CPU with AVX-512 F/BW/VL/DQ (compiled with them); both AVX-512 integer paths use it.
void quantize_activation_row_avx512(const float* x, int64_t cols, int64_t block, int8_t* h, int8_t* l, float* d,
                                    int32_t* h32, int32_t* l32, int32_t* h16, int32_t* l16);

// AVX2 version (quantize_act_avx2.cpp): the same operations 8 lanes at a time, the same bits. Only on a
// CPU with AVX2 (compiled with it).
void quantize_activation_row_avx2(const float* x, int64_t cols, int64_t block, int8_t* h, int8_t* l, float* d,
                                  int32_t* h32, int32_t* l32, int32_t* h16, int32_t* l16);
// aarch64 NEON version (quantize_act_neon.cpp): the same operations 16 lanes at a time, the same bits.
void quantize_activation_row_neon(const float* x, int64_t cols, int64_t block, int8_t* h, int8_t* l, float* d,
                                  int32_t* h32, int32_t* l32, int32_t* h16, int32_t* l16);

// Rows [t0, t0 + n) of `from` as a QuantizedActivations of n rows (the same bits: each row is quantized
// on its own), for kernels that take a few tokens at a time.
void copy_activation_rows(const QuantizedActivations& from, int64_t t0, int64_t n, QuantizedActivations& to);

// Quantizes n_tokens rows of X (row stride cols) into out (resized as needed) with `row_fn`, then fills
// the int16 plane q from h and l; rows split
// over the pool's threads when there are many (each row's result is the same whoever computes it).
void quantize_activations(const float* X, int64_t n_tokens, int64_t cols, int64_t block, QuantizedActivations& out,
                          ThreadPool* pool, QuantizeRowFn row_fn = reference::quantize_activation_row);

}  // namespace kernels
}  // namespace kvstash
