// Which bits this build's kernels compute: a numerics epoch and the kernel path (ISA) that runs.
//
// Batch invariance makes the KV of a token sequence a pure function of (model, adapters, tokens, KV type)
// *for one set of kernels*. Two things change those bits: another kernel path on the same build (the
// scalar, AVX2, AVX-512 and AVX-512 VNNI paths round differently), and a change to a kernel's fixed
// evaluation order between kvstash versions. The epoch counts the second: it is raised by every commit
// that changes the bits any path computes for any model (a new accumulation order, chunk size, exp
// approximation, quantization of activations, ...), and tests/unit/numerics_test.cpp's pinned logits
// tell when that happened. Prefix-cache keys include both (a cached block is reused only where it is
// bitwise what would be computed); state files record both, and a state whose numerics are not this
// process's loads (it continues closely) but is not exact here: the prefix cache does not take it.
#pragma once

#include <cstdint>
#include <string>

#include "backends/cpu/runtime/dispatch.h"

namespace kvstash {

// Epoch 1: 256-key attention chunks by absolute position, AVX2 integer K-quant kernels (session 7).
// Epoch 2: q4_0 / q4_1 on AVX2 with integer activations (matmul_int8_avx2.cpp; session 11).
inline constexpr uint32_t kNumericsEpoch = 2;

// The kernel path's code in keys and files; 0 = unknown (a file from before numerics were recorded).
enum class NumericsPath : uint32_t { unknown = 0, scalar = 1, avx2 = 2, avx512 = 3, avx512_vnni = 4 };

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

// The path `isa` runs on this CPU: avx512 is avx512_vnni where the CPU has VNNI and VBMI (the integer
// activation kernels, other bits).
NumericsPath numerics_path(Isa isa);
// This build's epoch on `isa`'s path.
Numerics numerics_of(Isa isa);
// numerics_of(active_isa()), or the device backend's path set by set_process_numerics_path.
Numerics current_numerics();
// "epoch 1, avx2", "epoch 2, cuda sm_90"; "unknown (recorded from kvstash 0.1.0 / numerics epoch 1 on)" for epoch 0.
std::string describe(const Numerics& numerics);

}  // namespace kvstash
