// Does this CPU run AMX int8 tiles, and how fast (issue 35: "AMX where the CPU runs it, detected by actually
// executing a tile instruction once, since some VMs report AMX and fault on it")?
//
//   1. asks the kernel for the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
//   2. under a SIGILL / SIGSEGV handler, loads a tile configuration, multiplies one 16 x 64 u8 tile by one
//      16 x 64 s8 tile (TDPBUSD) and compares the 16 x 16 int32 result with the scalar definition;
//   3. times a loop of independent TDPBUSD (4 accumulators) on one core: int8 multiply-adds per second;
//   4. times the per-block pattern of the library's AMX kernel (src/backends/cpu/matmul/gemm_int8_amx.cpp) on
//      L1-resident data: tile loads + four K = 32 TDPBSUD, then with the four tile stores, then with vector reads of
//      them.
// Prints one JSON object; exit 0 when the tile product ran and was exact, 1 when AMX is absent or faulted.
// Not part of the library: a measurement for docs/benchmarks.md. Build (GCC >= 11):
//   cmake --build build --target kvstash_amx_probe   (or: g++ -O2 -std=c++20 -mamx-tile -mamx-int8 -static
//   bench/amx_probe.cpp -o amx_probe, a static binary to carry to another machine)
#include <immintrin.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

constexpr long kArchReqXcompPerm = 0x1023;
constexpr long kXfeatureXtiledata = 18;

struct TileConfig {
    uint8_t palette_id = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

sigjmp_buf fault_jump;
volatile sig_atomic_t fault_signal = 0;
void on_fault(int sig) {
    fault_signal = sig;
    siglongjmp(fault_jump, 1);
}

bool cpu_flag(const char* flag) {
    FILE* f = std::fopen("/proc/cpuinfo", "r");
    if (f == nullptr) return false;
    char line[8192];
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f) != nullptr) {
        if (std::strncmp(line, "flags", 5) != 0) continue;
        const size_t n = std::strlen(flag);
        for (const char* p = std::strstr(line, flag); p != nullptr; p = std::strstr(p + 1, flag)) {
            if ((p[n] == ' ' || p[n] == '\n') && p[-1] == ' ') found = true;
        }
        break;
    }
    std::fclose(f);
    return found;
}

alignas(64) uint8_t a_tile[16 * 64];  // 16 rows of 64 u8
alignas(64) int8_t b_tile[16 * 64];   // 16 rows (groups of 4 k) of 16 columns x 4 s8
alignas(64) int32_t c_tile[16 * 16];

// C[m][n] = sum over k < 64 of A[m][k] * B[k / 4][4n + k % 4] (TDPBUSD's definition).
bool tile_product_is_exact() {
    for (int i = 0; i < 16 * 64; ++i) {
        a_tile[i] = static_cast<uint8_t>((i * 37 + 11) & 0xFF);
        b_tile[i] = static_cast<int8_t>((i * 53 + 7) & 0xFF);
    }
    TileConfig cfg;
    for (int t = 0; t < 3; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_loadd(1, a_tile, 64);
    _tile_loadd(2, b_tile, 64);
    _tile_dpbusd(0, 1, 2);
    _tile_stored(0, c_tile, 64);
    _tile_release();
    for (int m = 0; m < 16; ++m) {
        for (int n = 0; n < 16; ++n) {
            int32_t want = 0;
            for (int k = 0; k < 64; ++k) want += a_tile[m * 64 + k] * b_tile[(k / 4) * 64 + 4 * n + k % 4];
            if (want != c_tile[m * 16 + n]) return false;
        }
    }
    return true;
}

// int8 multiply-adds per second on this core: 4 independent accumulators, `steps` rounds of 4 TDPBUSD.
double tdpbusd_rate(long steps) {
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, a_tile, 64);
    _tile_loadd(5, a_tile, 64);
    _tile_loadd(6, b_tile, 64);
    _tile_loadd(7, b_tile, 64);
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < steps; ++i) {
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    _tile_stored(0, c_tile, 64);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    _tile_release();
    return static_cast<double>(steps) * 4.0 * 16 * 16 * 64 / s;
}

// The AMX q8_0 kernel's per-block pattern (src/backends/cpu/matmul/gemm_int8_amx.cpp), timed in pieces on one core:
// ns per block of (stores 0) the tile loads, zeroing and four K = 32 TDPBSUD; (1) those and the four 1 KiB tile stores;
// (2) those and reading the stored products back with vector loads (as the float steps do). Where the time goes.
alignas(64) int8_t act_block[1024];
alignas(64) uint8_t weight_block[1024];
alignas(64) int32_t products[1024];
__attribute__((target("avx512f"))) double kernel_pattern_ns(long steps, int variant) {
    TileConfig cfg;
    for (int t = 0; t < 2; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 32;
    }
    for (int t = 2; t < 4; ++t) {
        cfg.rows[t] = 8;
        cfg.colsb[t] = 64;
    }
    for (int t = 4; t < 8; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    __m512i sink = _mm512_setzero_si512();
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < steps; ++i) {
        _tile_loadd(0, act_block, 32);
        _tile_loadd(1, act_block + 512, 32);
        _tile_loadd(2, weight_block, 128);
        _tile_loadd(3, weight_block + 64, 128);
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_zero(7);
        _tile_dpbsud(4, 0, 2);
        _tile_dpbsud(5, 1, 2);
        _tile_dpbsud(6, 0, 3);
        _tile_dpbsud(7, 1, 3);
        if (variant >= 1) {
            _tile_stored(4, products, 64);
            _tile_stored(5, products + 256, 64);
            _tile_stored(6, products + 512, 64);
            _tile_stored(7, products + 768, 64);
        }
        if (variant >= 2) {
            for (int j = 0; j < 64; ++j) sink = _mm512_add_epi32(sink, _mm512_load_si512(products + 16 * j));
        }
    }
    _tile_stored(4, products, 64);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    _tile_release();
    alignas(64) int32_t out[16];
    _mm512_store_si512(out, sink);
    if (out[0] == 12345) std::printf(" ");  // keep the reads
    return s / static_cast<double>(steps) * 1e9;
}

}  // namespace

int main() {
    const bool flags = cpu_flag("amx_tile") && cpu_flag("amx_int8");
    const long perm = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata);
    bool ran = false, exact = false;
    double rate = 0.0;
    double block_ns[3] = {0.0, 0.0, 0.0};
    if (flags && perm == 0) {
        struct sigaction sa = {};
        sa.sa_handler = on_fault;
        sigaction(SIGILL, &sa, nullptr);
        sigaction(SIGSEGV, &sa, nullptr);
        if (sigsetjmp(fault_jump, 1) == 0) {
            exact = tile_product_is_exact();
            ran = true;
            if (exact) {
                rate = tdpbusd_rate(20000000);
                for (int v = 0; v < 3; ++v) block_ns[v] = kernel_pattern_ns(2000000, v);
            }
        }
    }
    std::printf(
        "{\"cpuinfo_amx_tile_and_int8\": %s, \"arch_prctl_xtiledata\": %ld, \"fault_signal\": %d, "
        "\"tile_product_ran\": %s, \"tile_product_exact\": %s, \"tdpbusd_int8_macs_per_s_one_core\": %.4g, "
        "\"kernel_block_ns\": {\"load_zero_4dp\": %.1f, \"and_4_stores\": %.1f, \"and_vector_reads\": %.1f}}\n",
        flags ? "true" : "false", perm, static_cast<int>(fault_signal), ran ? "true" : "false",
        exact ? "true" : "false", rate, block_ns[0], block_ns[1], block_ns[2]);
    return ran && exact ? 0 : 1;
}
