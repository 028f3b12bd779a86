// The numerics identity of the running kernels (backends/cpu/runtime/numerics.h).
#include "backends/cpu/runtime/numerics.h"

#include <atomic>

namespace kvstash {

NumericsPath numerics_path(Isa) { return NumericsPath::cpu; }

bool matmul_reads_q5_0(Isa isa) {
    // Only the AVX2 integer kernels read q5_0 blocks (22 bytes: fewer bytes than q8_0's 34); the others read
    // the q8_0 repacking, whose integer product is the same bits (backends/cpu/matmul/quantize_act.h).
    return isa == Isa::avx2;
}

Numerics numerics_of(Isa isa) { return Numerics{kNumericsEpoch, numerics_path(isa)}; }

namespace {
std::atomic<uint32_t> process_path{0};  // 0: the CPU's (numerics_of(active_isa()))
}  // namespace

NumericsPath cuda_numerics_path(int compute_capability) {
    return static_cast<NumericsPath>(kCudaNumericsPathBase + static_cast<uint32_t>(compute_capability));
}

bool is_cuda_path(NumericsPath path) { return static_cast<uint32_t>(path) >= kCudaNumericsPathBase; }

void set_process_numerics_path(NumericsPath path) {
    process_path.store(static_cast<uint32_t>(path), std::memory_order_release);
}

Numerics current_numerics() {
    const uint32_t device = process_path.load(std::memory_order_acquire);
    if (device != 0) return Numerics{kNumericsEpoch, static_cast<NumericsPath>(device)};
    return numerics_of(active_isa());
}

std::string describe(const Numerics& numerics) {
    if (numerics.epoch == 0 || numerics.path == NumericsPath::unknown) {
        return "unknown (not recorded: saved by a kvstash from before numerics epochs)";
    }
    if (is_cuda_path(numerics.path)) {
        const uint32_t cc = static_cast<uint32_t>(numerics.path) - kCudaNumericsPathBase;
        return "epoch " + std::to_string(numerics.epoch) + ", cuda sm_" + std::to_string(cc);
    }
    const char* path = "unknown path";
    switch (numerics.path) {
        case NumericsPath::scalar: path = "scalar"; break;
        case NumericsPath::avx2: path = "avx2"; break;
        case NumericsPath::avx512: path = "avx512"; break;
        case NumericsPath::avx512_vnni: path = "avx512-vnni"; break;
        case NumericsPath::cpu: path = "cpu"; break;
        case NumericsPath::unknown: break;
    }
    return "epoch " + std::to_string(numerics.epoch) + ", " + path;
}

}  // namespace kvstash
