#!/usr/bin/env bash
# Prepares, on a machine without a GPU, what a GPU session carries to the GPU machine (docs/cuda.md):
#   build-gpu-pack/gpu_tests    the GPU test binary, built here (CUDA runtime and GoogleTest linked statically:
#                               it needs glibc >= 2.34, libstdc++ >= GLIBCXX_3.4.29 and the driver's libcuda there)
#   build-gpu-pack/gpu_bench    kernel timings (tests/gpu/tools/gpu_bench.cpp), built the same way
#   build-gpu-pack/googletest   GoogleTest's sources (Debian's /usr/src/googletest), for scripts/gpu_check.sh
#                               --build, which rebuilds the kernels with the GPU machine's own nvcc
#   build-gpu-pack/MANIFEST     commit, nvcc version, sizes, sha256
# and, unless --kernels-only, the whole kvstash with the CUDA backend (build-cuda-full/, -DKVSTASH_CUDA=ON):
#   build-gpu-pack/kvstash          the CLI (--device cuda)
#   build-gpu-pack/gpu_e2e_tests    the backend's end-to-end GPU tests (tests/gpu/e2e)
#   build-gpu-pack/lib/             the shared libraries they need that a bare machine lacks (ldd: everything
#                                   but glibc's own and the driver's libcuda), for LD_LIBRARY_PATH there
# Then prints the device tool's carry list. build-gpu-pack/ is git-ignored (/build*/).
#   scripts/gpu_pack.sh [--kernels-only]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PACK="$ROOT/build-gpu-pack"
NVCC="$(command -v nvcc || true)"
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then
  echo "gpu_pack.sh: nvcc not found (PATH, /usr/local/cuda/bin): install the CUDA toolkit, or build on the GPU machine (scripts/gpu_check.sh --build)" >&2
  exit 2
fi

GENERATOR=(); command -v ninja >/dev/null && GENERATOR=(-G Ninja)
[ -f "$ROOT/build-cuda/CMakeCache.txt" ] && GENERATOR=()
cmake -S "$ROOT/tests/gpu/standalone" -B "$ROOT/build-cuda" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$NVCC" >/dev/null
cmake --build "$ROOT/build-cuda" -j"$(nproc)"

FULL=1
[ "${1:-}" = "--kernels-only" ] && FULL=0
if [ "$FULL" -eq 1 ]; then
  # The library with the CUDA backend, the CLI and the end-to-end GPU tests (cold: the whole library).
  cmake -S "$ROOT" -B "$ROOT/build-cuda-full" -DCMAKE_BUILD_TYPE=Release -DKVSTASH_CUDA=ON -DKVSTASH_PYTHON=OFF \
    -DCMAKE_CUDA_COMPILER="$NVCC" >/dev/null
  cmake --build "$ROOT/build-cuda-full" -j"$(nproc)" --target kvstash_cli gpu_e2e_tests
fi

rm -rf "$PACK"
mkdir -p "$PACK"
cp "$ROOT/build-cuda/gpu/gpu_tests" "$ROOT/build-cuda/gpu/gpu_bench" "$PACK/"
if [ "$FULL" -eq 1 ]; then
  cp "$ROOT/build-cuda-full/kvstash" "$ROOT/build-cuda-full/tests/gpu/gpu_e2e_tests" "$PACK/"
  strip "$PACK/kvstash" "$PACK/gpu_e2e_tests"
  mkdir -p "$PACK/lib"
  # Every shared library but glibc's (libc, libm, libpthread, libdl, librt, the loader) and the driver's.
  for bin in "$PACK/kvstash" "$PACK/gpu_e2e_tests"; do
    ldd "$bin" | awk '$3 ~ /^\// {print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda)\.so' |
    while read -r lib; do cp -L "$lib" "$PACK/lib/"; done
fi
if [ -d /usr/src/googletest ]; then
  cp -r /usr/src/googletest "$PACK/googletest"
else
  echo "gpu_pack.sh: note: /usr/src/googletest is absent (Debian package googletest): gpu_check.sh --build will need a GoogleTest there" >&2
fi
{
  echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "nvcc: $("$NVCC" --version | tail -1)"
  echo "cuda architectures: $(grep -o 'CMAKE_CUDA_ARCHITECTURES:STRING=.*' "$ROOT/build-cuda/CMakeCache.txt" | cut -d= -f2)"
  echo "glibc needed: $(objdump -T "$PACK/gpu_tests" | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1)"
  (cd "$PACK" && sha256sum gpu_tests gpu_bench $( [ -f kvstash ] && echo kvstash gpu_e2e_tests ))
  [ -d "$PACK/lib" ] && echo "shared libraries carried: $(cd "$PACK/lib" && echo *)"
} >"$PACK/MANIFEST"
cat "$PACK/MANIFEST"
# The device tool carries at most 64 MiB with the working tree, whose tracked files (the fixtures) are
# ~42 MiB now: the pack travels compressed (~10 MB instead of ~29) and is unpacked there.
TGZ="$ROOT/build-gpu-pack-tgz"
mkdir -p "$TGZ"
tar czf "$TGZ/pack.tar.gz" -C "$ROOT" build-gpu-pack
echo "size: $(du -sh "$PACK" | cut -f1), compressed $(du -sh "$TGZ/pack.tar.gz" | cut -f1); tracked files" \
  "$(git -C "$ROOT" ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | awk '{printf "%.1f MiB", $1 / 1048576}')" \
  "(the device tool carries at most 64 MiB in all)"
echo
echo "carry: [\"build-gpu-pack-tgz\"]"
echo "command: tar xzf build-gpu-pack-tgz/pack.tar.gz && scripts/gpu_check.sh \$OUT      (timeout_s 540; docs/cuda.md)"
