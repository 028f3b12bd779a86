// The AMX setting of the dispatcher (dispatch.h): whether this process can run Intel AMX int8 tile products, and
// whether the AVX-512 path runs its AMX prefill tiles (backends/cpu/matmul/gemm_int8_amx.h).
//
// KVSTASH_ISA=amx is the AVX-512 path with the AMX tiles for q8_0 and q4_K prefill: the same bits as every other path
// (docs/architecture/canonical-matmul.md, "AMX"). Opt-in, never the default: on the one AMX machine measured (an Intel
// Xeon VM, docs/benchmarks.md "AMX") these tiles were not faster than the VNNI ones. KVSTASH_ISA=avx512 is the AVX-512
// path without them; KVSTASH_ISA=amx where AMX does not run is refused as any path the CPU lacks: active_isa() throws
// Error(invalid_argument) with what the detection found.
//
// Why more than CPUID. Some virtual machines report AMX-TILE / AMX-INT8 in CPUID and fault on the first tile
// instruction (llama.cpp's AMX path died with SIGILL on such a VM, docs/benchmarks-history.md), and Linux hands out
// the 8 KiB tile data state only on request (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA; refused by kernels
// before 5.16 and where the hypervisor does not expose it). So AMX counts as available only when, in this order:
// CPUID reports AMX-TILE and AMX-INT8 (and the AVX-512 VNNI path, which the AMX path falls back to, runs); the kernel
// grants the tile state; and one tile product with the kernel's own shapes (gemm_int8_amx.h
// amx_tile_product_is_exact), executed under a SIGILL / SIGSEGV handler, equals the scalar sums. Detected once per
// process, on first use: a process that does not set KVSTASH_ISA=amx executes no tile instruction unless it asks
// (isa_settings, instruction_sets and the tests do).
#pragma once

#include <string>

namespace kvstash {

inline constexpr const char* kAvx512Amx = "amx";  // the KVSTASH_ISA value and instruction_sets().active name

// CPUID.(EAX=7, ECX=0):EDX bits 24 and 25 (AMX-TILE, AMX-INT8): what the CPU, or a hypervisor, reports (dispatch.cpp,
// which reads CPUID once).
bool cpuid_reports_amx();
// Whether this process runs the AMX tiles: every check above passed (cached).
bool cpu_supports_amx();
// What the detection found: the step that failed and why, or that the tile product ran exactly (for
// `kvstash --version`'s refusal of KVSTASH_ISA=amx and the tests' skip messages).
const std::string& amx_detection_detail();
// Whether the avx512 path of this process runs the AMX tiles: KVSTASH_ISA=amx (accepted only where cpu_supports_amx()).
bool avx512_uses_amx();

struct AmxSupport {
    bool usable = false;
    std::string detail;
};
// Runs the checks above, uncached (amx_detect.cpp; on x86-64 only, elsewhere not usable). cpuid_amx:
// cpuid_reports_amx(); avx512_vnni: cpu_supports_avx512_vnni(). Installs its signal handlers only around the one tile
// product and restores the previous ones.
AmxSupport detect_amx_support(bool cpuid_amx, bool avx512_vnni);

}  // namespace kvstash
