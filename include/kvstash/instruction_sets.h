// The instruction sets kvstash's CPU kernels can run here, and the one they run (`kvstash --version`,
// diagnostics). The environment variable KVSTASH_ISA forces one: scalar, avx2, avx512, avx512-novnni
// (the AVX-512 path without its VNNI integer kernels, on a CPU that has them), or amx (the AVX-512 path with the AMX
// prefill tiles, opt-in, on a CPU found to run them) on x86-64; scalar, neon, or
// neon-nodotprod (the NEON path without its dot-product integer kernels) on ARM64.
#pragma once

#include <string>
#include <vector>

namespace kvstash {

struct InstructionSets {
    std::string active;                  // "scalar", "avx2", "avx512", "amx" or "neon"
    std::vector<std::string> available;  // every path this CPU runs, scalar first (then "amx" where it runs)
};

// Throws Error(invalid_argument) when KVSTASH_ISA names a path this CPU lacks or an unknown one.
InstructionSets instruction_sets();

}  // namespace kvstash
