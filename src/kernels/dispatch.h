// Runtime choice of the instruction set used by the matmul kernels.
//
// The best path the CPU supports is chosen once per process (__builtin_cpu_supports). The environment
// variable KVSTASH_ISA=scalar|avx2|avx512 forces one (tests, benchmarks); forcing an ISA this CPU or
// build lacks, or an unknown name, makes active_isa() and matmul() throw Error(invalid_argument).
#pragma once

#include <cstdint>
#include <vector>

#include "format/tensor_type.h"

namespace kvstash {

class ThreadPool;

enum class Isa { scalar, avx2, avx512 };

Isa active_isa();
// Every path this CPU can run, scalar first.
std::vector<Isa> available_isas();
const char* isa_name(Isa isa);  // "scalar", "avx2", "avx512"

// `matmul` and `dot_row` (kernels/matmul.h) on a given path, whatever KVSTASH_ISA says. Throws
// Error(invalid_argument) if this CPU cannot run `isa`. Results of one ISA are bitwise reproducible;
// different ISAs agree to rounding (their reduction orders differ).
void matmul_with(Isa isa, TensorType type, const void* W, int64_t rows, int64_t cols, const float* X, int64_t n_tokens,
                 float* Y, ThreadPool* pool);
float dot_row_with(Isa isa, TensorType type, const void* w_row, const float* x, int64_t cols);

// Whether matmul_with(isa, type, ...) multiplies integer activations: the K-quants and q8_0 on the AVX-512 path
// when the CPU has VNNI and VBMI (where the integer kernels are faster); f32 activations otherwise.
// (The AVX2 and scalar integer code is exact but slower than their f32 paths, so they keep f32.)
bool matmul_uses_integer_activations(Isa isa, TensorType type);

// The integer-activation product (kernels/quantize_act.h, reference/matmul_int8_ref.cpp) of a
// block-quantized type on `isa`, whether or not matmul() uses it for that type (tests, benchmarks).
// Every ISA gives the same bits. Throws Error(invalid_argument) for f32 / f16 / bf16.
void matmul_integer_with(Isa isa, TensorType type, const void* W, int64_t rows, int64_t cols, const float* X,
                         int64_t n_tokens, float* Y, ThreadPool* pool);

}  // namespace kvstash
