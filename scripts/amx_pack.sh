#!/usr/bin/env bash
# Prepares, on any x86-64 machine with the build dependencies, what scripts/amx_check.sh runs on a machine with AMX
# (issue 35; docs/benchmarks.md, "AMX"): the binaries built here and the shared libraries they need that a bare
# machine lacks, packed small enough to travel with the working tree (the device tool carries at most 64 MiB in all;
# the tracked files are ~42 MiB).
#   build-amx-pack/bin/   kvstash, kvstash_bench, kvstash_amx_probe and the unit tests amx_check.sh runs:
#                         unit_gemm_int8_amx, unit_repack_tiles, unit_numerics, unit_matmul_canonical, unit_gemm_int8
#   build-amx-pack/lib/   their shared libraries but glibc's (ldd), for LD_LIBRARY_PATH there
#   build-amx-pack/MANIFEST   commit, compiler, sizes, sha256
#   build-amx-pack-tgz/pack.tar.gz   all of it, compressed (what is carried)
# The binaries come from BUILD_DIR (default build/, a configured Release build: only what changed is recompiled).
# Test binaries find the fixtures through KVSTASH_TEST_SOURCE_DIR, which amx_check.sh sets to the tree it runs in.
#   scripts/amx_pack.sh [BUILD_DIR]
# Then, on the AMX machine, from the repository root of a copy of this tree with build-amx-pack-tgz/ carried:
#   tar xzf build-amx-pack-tgz/pack.tar.gz && scripts/amx_check.sh OUTDIR
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${1:-$ROOT/build}"
PACK="$ROOT/build-amx-pack"
TESTS=(unit_gemm_int8_amx unit_repack_tiles unit_numerics unit_matmul_canonical unit_gemm_int8)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  echo "amx_pack.sh: $BUILD is not a configured build directory: cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release" >&2
  exit 2
fi
if ! grep -q 'CMAKE_BUILD_TYPE:STRING=Release' "$BUILD/CMakeCache.txt" || grep -q 'KVSTASH_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  echo "amx_pack.sh: $BUILD must be a Release build without sanitizers (the speeds are measured there)" >&2
  exit 2
fi
cmake --build "$BUILD" -j"$(nproc)" --target kvstash_cli kvstash_bench kvstash_amx_probe "${TESTS[@]}"

rm -rf "$PACK"
mkdir -p "$PACK/bin" "$PACK/lib"
cp "$BUILD/kvstash" "$BUILD/bench/kvstash_bench" "$BUILD/bench/kvstash_amx_probe" "$PACK/bin/"
for t in "${TESTS[@]}"; do cp "$BUILD/tests/$t" "$PACK/bin/"; done
strip "$PACK"/bin/*
# Every shared library but glibc's (libc, libm, libpthread, libdl, librt, the loader), the C++ runtime's included.
for bin in "$PACK"/bin/*; do
  ldd "$bin" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$PACK/lib/"; done
{
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(. /etc/os-release && echo "$PRETTY_NAME"), from $BUILD"
  echo "compiler: $(grep -o 'CMAKE_CXX_COMPILER:[A-Z]*=.*' "$BUILD/CMakeCache.txt" | cut -d= -f2) ($(c++ --version | head -1))"
  echo "glibc needed: $(objdump -T "$PACK"/bin/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1)"
  (cd "$PACK/bin" && sha256sum *)
  echo "shared libraries carried: $(cd "$PACK/lib" && echo *)"
} >"$PACK/MANIFEST"
cat "$PACK/MANIFEST"
TGZ="$ROOT/build-amx-pack-tgz"
mkdir -p "$TGZ"
tar czf "$TGZ/pack.tar.gz" -C "$ROOT" build-amx-pack
echo "size: $(du -sh "$PACK" | cut -f1), compressed $(du -sh "$TGZ/pack.tar.gz" | cut -f1); tracked files" \
  "$(git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -1 | awk '{printf "%.1f MiB", $1 / 1048576}')" \
  "(the device tool carries at most 64 MiB in all)"
echo
echo "carry: [\"build-amx-pack-tgz\"]"
echo "command: tar xzf build-amx-pack-tgz/pack.tar.gz && scripts/amx_check.sh \$OUT      (timeout_s 300)"
