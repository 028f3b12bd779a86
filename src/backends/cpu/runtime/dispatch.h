// Runtime choice of the instruction set, for every kernel: the CPU's features (read once per process),
// KVSTASH_ISA, and the table of each ISA's kernel functions. No other file reads CPUID.
//
// The best path the CPU supports is chosen once per process. The environment variable
// KVSTASH_ISA=scalar|avx2|avx512 (x86-64) or scalar|neon (aarch64) forces one (tests, benchmarks), as do
// avx512-novnni and neon-nodotprod (numerics.h) and amx (the AVX-512 path with AMX prefill tiles, opt-in: amx.h);
// forcing an ISA this CPU or build lacks, or an unknown name, makes active_isa() and matmul() throw
// Error(invalid_argument).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/rope/rope_params.h"
#include "format/tensor_type.h"

// Whether this build has the x86 kernels (*_avx2.cpp, *_avx512*.cpp), which CMakeLists.txt compiles for x86 only.
// Elsewhere every x86 path reads as unsupported and only the code naming their functions is left out.
#if defined(__x86_64__) || defined(__i386__)
#define KVSTASH_HAVE_X86_KERNELS 1
#else
#define KVSTASH_HAVE_X86_KERNELS 0
#endif
// Whether this build has the aarch64 kernels (*_neon.cpp, *_neon_dotprod.cpp), which CMakeLists.txt compiles for
// aarch64 only. NEON (Advanced SIMD) is part of the aarch64 baseline; the dot-product instructions are not.
#if defined(__aarch64__)
#define KVSTASH_HAVE_NEON_KERNELS 1
#else
#define KVSTASH_HAVE_NEON_KERNELS 0
#endif

namespace kvstash {

enum class Isa { scalar, avx2, avx512, neon };

// The instruction-set extensions kvstash uses, as this CPU reports them. Read once: CPUID is slow in a
// virtual machine (a VM exit, microseconds) and matmul checks the ISA on every call (a decode step
// makes hundreds).
struct CpuFeatures {
    bool avx2 = false, fma = false, f16c = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
    bool avx512vnni = false, avx512vbmi = false;  // the integer-activation kernels (*_avx512vnni.cpp)
    bool neon = false;                            // aarch64 Advanced SIMD (always there): *_neon.cpp
    bool neon_dotprod = false;  // aarch64 FEAT_DotProd (getauxval(AT_HWCAP) & HWCAP_ASIMDDP): *_neon_dotprod.cpp
};
const CpuFeatures& cpu_features();

// Whether this CPU runs `isa`'s kernels: avx2 = AVX2 + FMA + F16C (*_avx2.cpp); avx512 = those and
// AVX-512 F/BW/VL/DQ (*_avx512.cpp); neon = an aarch64 CPU (*_neon.cpp).
bool cpu_supports(Isa isa);
// Whether it also runs the AVX-512 integer-activation kernels: avx512 and VNNI (vpdpbusd, vpdpwssd) and
// VBMI (vpermb).
bool cpu_supports_avx512_vnni();
// Whether it also runs the NEON integer-activation kernels with the dot-product instructions (sdot).
bool cpu_supports_neon_dotprod();

Isa active_isa();
// Every path this CPU can run, scalar first.
std::vector<Isa> available_isas();
const char* isa_name(Isa isa);  // "scalar", "avx2", "avx512", "neon"

// Whether matmul_with(isa, type, ...) (backends/cpu/matmul/matmul.h) multiplies integer activations: every
// block-quantized type (q4_0, q4_1, q5_0, q8_0, q4_K, q5_K, q6_K) on every path, f32 activations for f32 /
// f16 / bf16. The same answer for every ISA: one canonical arithmetic per type, which every path computes
// bitwise (docs/architecture/canonical-matmul.md). The ISA parameter stays for callers that ask per path.
bool matmul_uses_integer_activations(Isa isa, TensorType type);

struct SsmConvArgs;  // backends/cpu/ssm/ssm.h
struct SsmScanArgs;

namespace kernels {

struct MatmulArgs;          // backends/cpu/matmul/matmul_impl.h
struct AttentionGroupArgs;  // backends/cpu/attention/attention_group.h

// Rows [row_begin, row_end) of a matmul (backends/cpu/matmul/matmul_impl.h).
using MatmulRowsFn = void (*)(const MatmulArgs& args, int64_t row_begin, int64_t row_end);
// One activation row quantized to two int8 planes (backends/cpu/matmul/quantize_act.h).
using QuantizeRowFn = void (*)(const float* x, int64_t cols, int64_t block, int8_t* h, int8_t* l, float* d,
                               int32_t* h32, int32_t* l32, int32_t* h16, int32_t* l16);
// Rotates pairs [begin, half) of the head at v, half = n_rot / 2 (backends/cpu/rope/rope_rotate.h).
using RopeRotateFn = void (*)(RopeLayout layout, float* v, int64_t half, int64_t begin, const float* cos_v,
                              const float* sin_v);

// The kernel functions of one instruction set. Each family's header says which bits they give: the same
// as the scalar reference's on every ISA (matmul: docs/architecture/canonical-matmul.md; every other op:
// docs/architecture/canonical-float-ops.md).
struct KernelTable {
    MatmulRowsFn matmul_rows = nullptr;       // f32 activations (matmul_impl.h)
    MatmulRowsFn matmul_int8_rows = nullptr;  // integer activations (reference/matmul_int8_ref.cpp)
    QuantizeRowFn quantize_activation_row = nullptr;
    // attention_rows.h
    float (*attention_dot)(const float* q, const uint8_t* k_row, int64_t n, TensorType type) = nullptr;
    void (*attention_axpy)(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type) = nullptr;
    void (*exp_f32_shifted_row)(const float* in, float* out, int64_t n, float shift) = nullptr;  // exp_f32.h
    // attention_group.h: every head of a GQA group at once; nullptr where the ISA has none.
    void (*attention_group)(const AttentionGroupArgs& args) = nullptr;
    double (*sum_of_squares)(const float* x, int64_t n) = nullptr;  // norm.h
    void (*scale_row)(const float* x, const float* weight, float scale, float* out, int64_t n) = nullptr;
    RopeRotateFn rope_rotate = nullptr;
    void (*swiglu)(const float* gate, const float* up, float* out, int64_t n) = nullptr;  // activation.h
    // ssm.h: channels [begin, end) of a conv call, heads [begin, end) of a scan call.
    void (*ssm_conv)(const SsmConvArgs& args, int64_t channel_begin, int64_t channel_end) = nullptr;
    void (*ssm_scan)(const SsmScanArgs& args, int64_t head_begin, int64_t head_end) = nullptr;
};

// The table of `isa`, which must be one of available_isas() (not checked: the per-row kernels ask for it
// on every row; matmul checks it once per call).
const KernelTable& kernel_table(Isa isa);

}  // namespace kernels

}  // namespace kvstash
