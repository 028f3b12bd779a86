#!/usr/bin/env bash
# Checks that no file compiled for one instruction set defines a weak (shared) symbol.
#
# Usage: scripts/check_isa_symbols.sh BUILD_DIR      (a configured and built CMake build directory)
#
# Files named *_avx2.cpp, *_avx512.cpp and *_avx512vnni.cpp are compiled with -mavx2 / -mavx512f ...
# (CMakeLists.txt), on aarch64 *_neon_dotprod.cpp with -march=armv8.2-a+dotprod. An inline or template
# function they instantiate out of line (std::vector<float>'s resize, a struct's implicit destructor, an
# `inline` function of a header) is emitted as a weak symbol
# built for that instruction set; the linker keeps one copy of it for the whole program, possibly that
# one, and plain code on a machine without the extension then dies with SIGILL. This is what happened
# to the unit tests under ASan on an AVX2-only machine. Kernel files use kernels::ScratchArray (built
# for the baseline) instead of containers, and header helpers have internal linkage.
# Weak symbols are nm types W/V (defined weak) and u (unique global). DW.ref.__gxx_personality_v0 (a
# pointer to the C++ personality routine, the same data everywhere) is allowed.
# Exit 0: none; 1: some (file and symbol listed); 2: usage or missing object file.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ $# -ne 1 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    [[ $# -eq 1 ]] && exit 0 || exit 2
fi
BUILD="$1"
OBJ_DIR="$BUILD/CMakeFiles/kvstash.dir"
if [[ ! -d "$OBJ_DIR" ]]; then
    echo "check_isa_symbols: $OBJ_DIR not found: pass a built CMake build directory of kvstash" >&2
    exit 2
fi

cd "$ROOT"
# An aarch64 build (its NEON objects present) has one such kind of file: *_neon_dotprod.cpp (-march=...+dotprod; the
# *_neon.cpp files are built for the baseline); nm of the cross binutils reads its objects where it is installed.
NM=nm
PATTERN='_(avx2|avx512|avx512vnni|amx)\.cpp$'
if compgen -G "$OBJ_DIR/src/backends/cpu/*/*_neon.cpp.o" >/dev/null; then
    PATTERN='_neon_dotprod\.cpp$'
    command -v aarch64-linux-gnu-nm >/dev/null && NM=aarch64-linux-gnu-nm
fi
mapfile -t SOURCES < <(find src -name '*.cpp' | grep -E "$PATTERN" | sort)
bad=0
checked=0
for src in "${SOURCES[@]}"; do
    obj="$OBJ_DIR/$src.o"
    if [[ ! -f "$obj" ]]; then
        echo "check_isa_symbols: $obj missing: build the library first (cmake --build $BUILD)" >&2
        exit 2
    fi
    checked=$((checked + 1))
    while read -r type name; do
        [[ "$name" == DW.ref.__gxx_personality_v0 ]] && continue
        echo "check_isa_symbols: $src defines weak symbol ($type) $(c++filt "$name")" >&2
        bad=1
    done < <("$NM" --defined-only "$obj" | awk '$2 ~ /^[WVu]$/ {print $2, $3}')
done
if [[ $bad -ne 0 ]]; then
    echo "check_isa_symbols: FAILED: an instruction-set file must not share code with the rest of the" \
         "program (use kernels::ScratchArray for scratch, give header helpers internal linkage)" >&2
    exit 1
fi
echo "check_isa_symbols: OK: $checked instruction-set files in $BUILD define no weak symbols"
