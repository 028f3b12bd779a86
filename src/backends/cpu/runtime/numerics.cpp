// The numerics identity of the running kernels (backends/cpu/runtime/numerics.h).
#include "backends/cpu/runtime/numerics.h"

#include "backends/cpu/matmul/quantize_act.h"

namespace kvstash {

NumericsPath numerics_path(Isa isa) {
    switch (isa) {
        case Isa::scalar: return NumericsPath::scalar;
        case Isa::avx2: return NumericsPath::avx2;
        case Isa::avx512: return avx512_uses_vnni() ? NumericsPath::avx512_vnni : NumericsPath::avx512;
    }
    return NumericsPath::unknown;
}

bool matmul_reads_q5_0(NumericsPath path) {
    switch (path) {
        case NumericsPath::avx2: return matmul_uses_integer_activations(Isa::avx2, kTensorTypeQ5_0);
        case NumericsPath::avx512_vnni: return kernels::uses_integer_activations(kTensorTypeQ5_0);
        case NumericsPath::scalar:  // f32 activations: the q8_0 rows
        case NumericsPath::avx512:
        case NumericsPath::unknown: break;
    }
    return false;
}

Numerics numerics_of(Isa isa) { return Numerics{kNumericsEpoch, numerics_path(isa)}; }

Numerics current_numerics() { return numerics_of(active_isa()); }

std::string describe(const Numerics& numerics) {
    if (numerics.epoch == 0 || numerics.path == NumericsPath::unknown) {
        return "unknown (not recorded: saved by a kvstash from before numerics epochs)";
    }
    const char* path = "unknown path";
    switch (numerics.path) {
        case NumericsPath::scalar: path = "scalar"; break;
        case NumericsPath::avx2: path = "avx2"; break;
        case NumericsPath::avx512: path = "avx512"; break;
        case NumericsPath::avx512_vnni: path = "avx512-vnni"; break;
        case NumericsPath::unknown: break;
    }
    return "epoch " + std::to_string(numerics.epoch) + ", " + path;
}

}  // namespace kvstash
