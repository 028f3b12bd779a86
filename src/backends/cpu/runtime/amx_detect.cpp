// AMX detection (amx.h): the kernel's permission, then one tile product under a fault handler.
#include "backends/cpu/runtime/amx.h"

#include "backends/cpu/runtime/dispatch.h"

#if KVSTASH_HAVE_X86_KERNELS
#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "backends/cpu/matmul/gemm_int8_amx.h"
#endif

namespace kvstash {

#if KVSTASH_HAVE_X86_KERNELS
namespace {

constexpr long kArchReqXcompPerm = 0x1023;  // linux/arch/x86/include/uapi/asm/prctl.h
constexpr long kXfeatureXtiledata = 18;     // the AMX tile data state component

sigjmp_buf fault_jump;
volatile sig_atomic_t fault_signal = 0;
void on_fault(int sig) {
    fault_signal = sig;
    siglongjmp(fault_jump, 1);
}

// One tile product under SIGILL / SIGSEGV handlers (the previous ones restored after): 1 exact, 0 wrong, -1 faulted.
int tile_product_result() {
    struct sigaction handler = {}, old_ill = {}, old_segv = {};
    handler.sa_handler = on_fault;
    sigemptyset(&handler.sa_mask);
    sigaction(SIGILL, &handler, &old_ill);
    sigaction(SIGSEGV, &handler, &old_segv);
    int result = -1;
    fault_signal = 0;
    if (sigsetjmp(fault_jump, 1) == 0) result = kernels::amx_tile_product_is_exact() ? 1 : 0;
    sigaction(SIGILL, &old_ill, nullptr);
    sigaction(SIGSEGV, &old_segv, nullptr);
    return result;
}

}  // namespace

AmxSupport detect_amx_support(bool cpuid_amx, bool avx512_vnni) {
    if (!cpuid_amx) return {false, "CPUID reports no AMX-TILE + AMX-INT8"};
    if (!avx512_vnni) return {false, "CPUID reports AMX but not the AVX-512 VNNI + VBMI path it builds on"};
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
        return {false, std::string("the kernel refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
                           std::strerror(errno) + ")"};
    }
    switch (tile_product_result()) {
        case 1: return {true, "CPUID AMX-TILE + AMX-INT8, tile state granted, one tile product (TDPBSUD) exact"};
        case 0: return {false, "a tile product (TDPBSUD) ran but differed from the scalar sums"};
        default:
            return {false, std::string("a tile instruction faulted (") +
                               (fault_signal == SIGILL ? "SIGILL" : "SIGSEGV") +
                               "): CPUID reports AMX that this machine does not run (a virtual machine?)"};
    }
}
#else
AmxSupport detect_amx_support(bool /*cpuid_amx*/, bool /*avx512_vnni*/) { return {false, "not an x86-64 build"}; }
#endif

}  // namespace kvstash
