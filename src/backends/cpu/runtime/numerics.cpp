// The numerics identity of the running kernels (backends/cpu/runtime/numerics.h).
#include "backends/cpu/runtime/numerics.h"

namespace kvstash {

NumericsPath numerics_path(Isa isa) {
    switch (isa) {
        case Isa::scalar: return NumericsPath::scalar;
        case Isa::avx2: return NumericsPath::avx2;
        case Isa::avx512: return cpu_supports_avx512_vnni() ? NumericsPath::avx512_vnni : NumericsPath::avx512;
    }
    return NumericsPath::unknown;
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
