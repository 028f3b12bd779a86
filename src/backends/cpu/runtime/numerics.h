// Which bits this build's kernels compute: a numerics epoch and the numerics path (the CPU, or a GPU).
//
// Batch invariance makes the KV of a token sequence a pure function of (model, adapters, tokens, KV type)
// *for one kernel arithmetic*. Two things change those bits: another backend whose arithmetic differs (a GPU;
// every CPU instruction set follows one canonical arithmetic since epoch 3, so all CPUs are one path), and a
// change to a kernel's fixed evaluation order between kvstash versions. The epoch counts the second: it is
// raised by every commit that changes the bits for any model (a new accumulation order, chunk size, exp
// approximation, quantization of activations, ...), and tests/unit/numerics_test.cpp's pinned logits
// tell when that happened. Prefix-cache keys include both (a cached block is reused only where it is
// bitwise what would be computed); state files record both, and a state whose numerics are not this
// process's loads (it continues closely) but is not exact here: the prefix cache does not take it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/runtime/dispatch.h"

namespace kvstash {

// Epoch 1: 256-key attention chunks by absolute position, AVX2 integer K-quant kernels.
// Epoch 2: q4_0 / q4_1 on AVX2 with integer activations (matmul_int8_avx2.cpp).
// Epoch 3: one arithmetic per op on every CPU path: matmul (integer activations for every block-quantized
// type, a 16-lane FMA dot product for f32 / f16 / bf16: docs/architecture/canonical-matmul.md) and
// attention (its dot product in 16 fma lanes, axpy as one fma per element: docs/architecture/canonical-float-ops.md).
inline constexpr uint32_t kNumericsEpoch = 3;

// The kernel path's code in keys and files; 0 = unknown (a file from before numerics were recorded).
// scalar .. avx512_vnni: the per-ISA paths of epochs 1 and 2, when each ISA rounded its own way (files of
// theirs still load, as not exact here). cpu: from epoch 3 on every CPU path (scalar, AVX2, AVX-512 with or
// without VNNI, aarch64's) computes the same bits (docs/architecture/canonical-matmul.md,
// canonical-float-ops.md), so the instruction set is not part of the identity: a state or a prefix-cache block
// made on any CPU continues bit-exactly on any other.
enum class NumericsPath : uint32_t { unknown = 0, scalar = 1, avx2 = 2, avx512 = 3, avx512_vnni = 4, cpu = 5 };

// A device backend's path: kCudaNumericsPathBase + the CUDA compute capability (major × 10 + minor: 0x15a
// is sm_90, H100 / H200). The CUDA kernels are bit-exact with themselves on one architecture, not with any
// CPU path (docs/cuda.md), so a GPU state continues elsewhere as not bit-exact.
inline constexpr uint32_t kCudaNumericsPathBase = 0x100;
NumericsPath cuda_numerics_path(int compute_capability);
bool is_cuda_path(NumericsPath path);
// Makes current_numerics() report `path` (a device backend's, chosen for the whole process by
// engine/device.h) instead of the CPU's; unknown restores the CPU's.
void set_process_numerics_path(NumericsPath path);

struct Numerics {
    uint32_t epoch = 0;
    NumericsPath path = NumericsPath::unknown;
    bool operator==(const Numerics&) const = default;
};

// KVSTASH_ISA (kernels/dispatch.h) also takes avx512-novnni: the AVX-512 path without the VNNI integer
// kernels, i.e. what a CPU without VNNI computes, so that a VNNI machine runs (and pins:
// tests/unit/numerics_test.cpp) that path's bits too.
inline constexpr const char* kAvx512WithoutVnni = "avx512-novnni";
// Whether the avx512 path of this process runs the VNNI integer-activation kernels: the CPU has them
// (cpu_supports_avx512_vnni) and KVSTASH_ISA is not avx512-novnni.
bool avx512_uses_vnni();
// KVSTASH_ISA=neon-nodotprod: the aarch64 NEON path without its dot-product integer kernels (the widening-multiply
// ones), i.e. what an aarch64 CPU without FEAT_DotProd computes, so that a CPU with it runs that path's bits too.
inline constexpr const char* kNeonWithoutDotprod = "neon-nodotprod";
// Whether the neon path of this process runs the dot-product integer kernels: the CPU has them
// (cpu_supports_neon_dotprod) and KVSTASH_ISA is not neon-nodotprod.
bool neon_uses_dotprod();
// The KVSTASH_ISA values this CPU runs, scalar first: the available ISAs' names and, on a CPU with AVX-512 VNNI,
// avx512-novnni; on an aarch64 CPU with the dot-product instructions, neon-nodotprod.
std::vector<std::string> isa_settings();

// The path `isa` runs in this process: NumericsPath::cpu for every ISA (they give the same bits).
NumericsPath numerics_path(Isa isa);
// This build's epoch on `isa`'s path.
Numerics numerics_of(Isa isa);
// numerics_of(active_isa()), or the device backend's path set by set_process_numerics_path.
Numerics current_numerics();
// Whether matmul on `isa` reads q5_0 matrices as stored (the AVX2 integer kernels: 22-byte blocks); on the
// other ISAs a model repacks them to q8_0 at load. Either layout gives the same bits (a speed choice only).
bool matmul_reads_q5_0(Isa isa);
// "epoch 3, cpu", "epoch 1, avx2", "epoch 2, cuda sm_90"; "unknown (recorded from kvstash 0.1.0 / numerics epoch 1 on)"
// for epoch 0.
std::string describe(const Numerics& numerics);

}  // namespace kvstash
