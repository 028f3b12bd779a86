// CPU feature detection, KVSTASH_ISA, and each instruction set's kernel table (backends/cpu/runtime/dispatch.h).
#include "backends/cpu/runtime/dispatch.h"

#include <cstdlib>
#include <string>

#include "backends/cpu/activation/activation.h"
#include "backends/cpu/attention/attention_group.h"
#include "backends/cpu/attention/attention_rows.h"
#include "backends/cpu/exp/exp_f32.h"
#include "backends/cpu/matmul/gemm_int8.h"
#include "backends/cpu/matmul/gemm_int8_amx.h"
#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/norm/norm.h"
#include "backends/cpu/rope/rope_rotate.h"
#include "backends/cpu/runtime/amx.h"
#include "backends/cpu/runtime/numerics.h"
#include "backends/cpu/ssm/ssm.h"
#include "kvstash/error.h"
#include "kvstash/instruction_sets.h"

#if KVSTASH_HAVE_X86_KERNELS
#include <cpuid.h>
#endif
#if KVSTASH_HAVE_NEON_KERNELS
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)  // linux/arch/arm64/include/uapi/asm/hwcap.h
#endif
#endif

namespace kvstash {
namespace {

constexpr Isa kEveryIsa[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::neon};

#if KVSTASH_HAVE_X86_KERNELS
// F16C through CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}

// AMX-TILE and AMX-INT8 through CPUID leaf 7, sub-leaf 0 (EDX bits 24, 25), read directly: what
// __builtin_cpu_supports knows of AMX differs between compilers.
bool detect_cpuid_amx() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (edx & (1u << 24)) != 0 && (edx & (1u << 25)) != 0;
}

CpuFeatures detect_cpu_features() {
    CpuFeatures f;
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = cpu_has_f16c();
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512dq = __builtin_cpu_supports("avx512dq");
    f.avx512vnni = __builtin_cpu_supports("avx512vnni");
    f.avx512vbmi = __builtin_cpu_supports("avx512vbmi");
    return f;
}
#elif KVSTASH_HAVE_NEON_KERNELS
CpuFeatures detect_cpu_features() {
    CpuFeatures f;
    f.neon = true;  // part of the aarch64 baseline
    f.neon_dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
    return f;
}
#else
CpuFeatures detect_cpu_features() { return {}; }  // no known extension: the scalar path
#endif
#if !KVSTASH_HAVE_X86_KERNELS
bool detect_cpuid_amx() { return false; }
#endif

bool detect_cpu_supports(Isa isa) {
    const CpuFeatures& f = cpu_features();
    switch (isa) {
        case Isa::scalar: return true;
        case Isa::avx2: return f.avx2 && f.fma && f.f16c;
        case Isa::avx512: return detect_cpu_supports(Isa::avx2) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
        case Isa::neon: return f.neon;
    }
    return false;
}

struct IsaChoice {
    Isa isa = Isa::scalar;
    bool vnni_off = false;     // KVSTASH_ISA=avx512-novnni: the AVX-512 path without its VNNI integer kernels
    bool amx = false;          // KVSTASH_ISA=amx: the AVX-512 path with the AMX prefill tiles
    bool dotprod_off = false;  // KVSTASH_ISA=neon-nodotprod: the NEON path without its dot-product integer kernels
    std::string error;         // non-empty: KVSTASH_ISA asked for something unusable
};

IsaChoice choose_isa() {
    IsaChoice choice;
    const char* forced = std::getenv("KVSTASH_ISA");
    if (forced && *forced) {
        std::string name = forced;
        if (name == kAvx512WithoutVnni) {
            choice.vnni_off = true;
            name = isa_name(Isa::avx512);
        } else if (name == kAvx512Amx) {
            // Refused like an ISA the CPU lacks (never a silent fall back: a benchmark or test of amx must not
            // measure another path), with what the detection found.
            if (!cpu_supports_amx()) {
                choice.error = "KVSTASH_ISA=amx but this CPU does not run AMX tiles: " + amx_detection_detail() +
                               "; unset it or choose one of the supported paths";
                choice.isa = Isa::avx512;
                return choice;
            }
            choice.amx = true;
            name = isa_name(Isa::avx512);
        } else if (name == kNeonWithoutDotprod) {
            choice.dotprod_off = true;
            name = isa_name(Isa::neon);
        }
        for (Isa isa : kEveryIsa) {
            if (name != isa_name(isa)) continue;
            if (!cpu_supports(isa)) {
                choice.error = "KVSTASH_ISA=" + std::string(forced) + " but this CPU does not support " + name +
                               "; unset it or choose one of the supported paths";
            }
            choice.isa = isa;
            return choice;
        }
        choice.error = "KVSTASH_ISA=" + name + " is not a known instruction set; use scalar, avx2, avx512, " +
                       kAvx512WithoutVnni + ", " + kAvx512Amx + ", neon or " + kNeonWithoutDotprod;
        return choice;
    }
    choice.isa = cpu_supports(Isa::avx512) ? Isa::avx512
                 : cpu_supports(Isa::avx2) ? Isa::avx2
                 : cpu_supports(Isa::neon) ? Isa::neon
                                           : Isa::scalar;
    // AMX is opt-in (KVSTASH_ISA=amx) until it is faster than the VNNI tiles: measured on an AMX Xeon it was not
    // (docs/benchmarks.md, "AMX"), so the default executes no tile instruction.
    return choice;
}

const IsaChoice& isa_choice() {
    static const IsaChoice choice = choose_isa();
    return choice;
}

kernels::KernelTable scalar_table() {
    kernels::KernelTable t;
    t.matmul_rows = kernels::reference::matmul_rows_scalar;
    t.matmul_int8_rows = kernels::reference::matmul_int8_rows_scalar;
    t.quantize_activation_row = kernels::reference::quantize_activation_row;
    t.attention_dot = kernels::reference::attention_dot;
    t.attention_axpy = kernels::reference::attention_axpy;
    t.exp_f32_shifted_row = kernels::reference::exp_f32_shifted_row;
    t.attention_group = nullptr;
    t.sum_of_squares = kernels::reference::sum_of_squares;
    t.scale_row = kernels::reference::scale_row;
    t.rope_rotate = kernels::reference::rope_rotate;
    t.swiglu = kernels::reference::swiglu;
    t.ssm_conv = kernels::reference::ssm_conv;
    t.ssm_scan = kernels::reference::ssm_scan;
    return t;
}

#if KVSTASH_HAVE_X86_KERNELS
kernels::KernelTable avx2_table() {
    kernels::KernelTable t;
    t.matmul_rows = kernels::matmul_rows_avx2;
    // The AVX2 integer kernels (exact, the scalar bits); matmul() uses them for every block-quantized type
    // (matmul_uses_integer_activations: K-quants, q8_0, q5_0, q4_0, q4_1).
    t.matmul_int8_rows = kernels::matmul_int8_rows_avx2;
    t.quantize_activation_row = kernels::quantize_activation_row_avx2;
    t.attention_dot = kernels::attention_dot_avx2;
    t.attention_axpy = kernels::attention_axpy_avx2;
    t.exp_f32_shifted_row = kernels::exp_f32_shifted_row_avx2;
    t.attention_group = kernels::attention_group_avx2;
    t.sum_of_squares = kernels::sum_of_squares_avx2;
    t.scale_row = kernels::scale_row_avx2;
    t.rope_rotate = kernels::rope_rotate_avx2;
    t.swiglu = kernels::swiglu_avx2;
    t.ssm_conv = kernels::ssm_conv_avx2;
    t.ssm_scan = kernels::ssm_scan_avx2;
    return t;
}

kernels::KernelTable avx512_table() {
    // With VNNI and VBMI the integer kernels use vpdpbusd; without them (Skylake-SP/X, KVSTASH_ISA=avx512-novnni) the
    // same many-token tiles run on vpmaddubsw + vpmaddwd, and a few tokens on the AVX2 integer kernels (gemm_int8.h).
    // The same bits either way: every path computes the scalar definition.
    // With AMX (avx512_uses_amx: VNNI too), q8_0 prefill on AMX tiles and everything else on the VNNI kernels.
    const bool vnni = avx512_uses_vnni();
    kernels::KernelTable t;
    t.matmul_rows = kernels::matmul_rows_avx512;
    t.matmul_int8_rows = avx512_uses_amx() ? kernels::gemm_int8_rows_amx
                         : vnni            ? kernels::gemm_int8_rows_avx512vnni
                                           : kernels::gemm_int8_rows_avx512bw;
    t.quantize_activation_row = kernels::quantize_activation_row_avx512;
    t.attention_dot = kernels::attention_dot_avx512;
    t.attention_axpy = kernels::attention_axpy_avx512;
    t.exp_f32_shifted_row = kernels::exp_f32_shifted_row_avx512;
    t.attention_group = kernels::attention_group_avx512;
    t.sum_of_squares = kernels::sum_of_squares_avx512;
    t.scale_row = kernels::scale_row_avx512;
    t.rope_rotate = kernels::rope_rotate_avx512;
    t.swiglu = kernels::swiglu_avx512;
    t.ssm_conv = kernels::ssm_conv_avx512;
    t.ssm_scan = kernels::ssm_scan_avx512;
    return t;
}
#endif

#if KVSTASH_HAVE_NEON_KERNELS
kernels::KernelTable neon_table() {
    // The integer kernels with sdot where the CPU has it (and KVSTASH_ISA is not neon-nodotprod), else with
    // widening multiplies: the same integers, the same bits. No grouped attention kernel: the per-row operations.
    kernels::KernelTable t;
    t.matmul_rows = kernels::matmul_rows_neon;
    t.matmul_int8_rows = neon_uses_dotprod() ? kernels::matmul_int8_rows_neon_dotprod : kernels::matmul_int8_rows_neon;
    t.quantize_activation_row = kernels::quantize_activation_row_neon;
    t.attention_dot = kernels::attention_dot_neon;
    t.attention_axpy = kernels::attention_axpy_neon;
    t.exp_f32_shifted_row = kernels::exp_f32_shifted_row_neon;
    t.attention_group = nullptr;
    t.sum_of_squares = kernels::sum_of_squares_neon;
    t.scale_row = kernels::scale_row_neon;
    t.rope_rotate = kernels::rope_rotate_neon;
    t.swiglu = kernels::swiglu_neon;
    t.ssm_conv = kernels::ssm_conv_neon;
    t.ssm_scan = kernels::ssm_scan_neon;
    return t;
}
#endif

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = detect_cpu_features();
    return features;
}

bool cpu_supports(Isa isa) {
    static const bool has[4] = {detect_cpu_supports(Isa::scalar), detect_cpu_supports(Isa::avx2),
                                detect_cpu_supports(Isa::avx512), detect_cpu_supports(Isa::neon)};
    return has[static_cast<int>(isa)];
}

bool cpu_supports_avx512_vnni() {
    static const bool has = cpu_supports(Isa::avx512) && cpu_features().avx512vnni && cpu_features().avx512vbmi;
    return has;
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::scalar: return "scalar";
        case Isa::avx2: return "avx2";
        case Isa::avx512: return "avx512";
        case Isa::neon: return "neon";
    }
    return "unknown";
}

Isa active_isa() {
    const IsaChoice& choice = isa_choice();
    if (!choice.error.empty()) throw Error(ErrorCode::invalid_argument, choice.error);
    return choice.isa;
}

bool avx512_uses_vnni() { return cpu_supports_avx512_vnni() && !isa_choice().vnni_off; }

namespace {
const AmxSupport& amx_support() {
    static const AmxSupport support = detect_amx_support(cpuid_reports_amx(), cpu_supports_avx512_vnni());
    return support;
}
}  // namespace

bool cpuid_reports_amx() {
    static const bool reported = detect_cpuid_amx();
    return reported;
}

bool cpu_supports_amx() { return amx_support().usable; }

const std::string& amx_detection_detail() { return amx_support().detail; }

bool avx512_uses_amx() { return isa_choice().amx; }

bool cpu_supports_neon_dotprod() {
    static const bool has = cpu_supports(Isa::neon) && cpu_features().neon_dotprod;
    return has;
}

bool neon_uses_dotprod() { return cpu_supports_neon_dotprod() && !isa_choice().dotprod_off; }

std::vector<std::string> isa_settings() {
    std::vector<std::string> settings;
    for (Isa isa : available_isas()) settings.emplace_back(isa_name(isa));
    if (cpu_supports_avx512_vnni()) settings.emplace_back(kAvx512WithoutVnni);
    if (cpu_supports_amx()) settings.emplace_back(kAvx512Amx);
    if (cpu_supports_neon_dotprod()) settings.emplace_back(kNeonWithoutDotprod);
    return settings;
}

std::vector<Isa> available_isas() {
    std::vector<Isa> isas;
    for (Isa isa : kEveryIsa) {
        if (cpu_supports(isa)) isas.push_back(isa);
    }
    return isas;
}

bool matmul_uses_integer_activations(Isa /*isa*/, TensorType type) {
    // One arithmetic per type on every path (docs/architecture/canonical-matmul.md).
    return kernels::uses_integer_activations(type);
}

const kernels::KernelTable& kernels::kernel_table(Isa isa) {
    // Each table built on first use only (taking the addresses of a path's functions runs none of them).
    switch (isa) {
#if KVSTASH_HAVE_X86_KERNELS
        case Isa::avx512: {
            static const KernelTable table = avx512_table();
            return table;
        }
        case Isa::avx2: {
            static const KernelTable table = avx2_table();
            return table;
        }
#else
        case Isa::avx512:
        case Isa::avx2: break;  // never available here (cpu_supports)
#endif
#if KVSTASH_HAVE_NEON_KERNELS
        case Isa::neon: {
            static const KernelTable table = neon_table();
            return table;
        }
#else
        case Isa::neon: break;  // never available here (cpu_supports)
#endif
        case Isa::scalar: break;
    }
    static const KernelTable table = scalar_table();
    return table;
}

InstructionSets instruction_sets() {
    InstructionSets sets;
    const Isa active = active_isa();
    sets.active = active == Isa::avx512 && avx512_uses_amx() ? kAvx512Amx : isa_name(active);
    for (Isa isa : available_isas()) sets.available.emplace_back(isa_name(isa));
    if (cpu_supports_amx()) sets.available.emplace_back(kAvx512Amx);
    return sets;
}

}  // namespace kvstash
