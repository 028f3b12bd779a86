#!/usr/bin/env bash
# Prepares, on a machine without a GPU, what a GPU session carries to the GPU machine (docs/cuda.md):
#   build-gpu-pack/gpu_tests    the GPU test binary, built here (CUDA runtime and GoogleTest linked statically:
#                               it needs glibc >= 2.34, libstdc++ >= GLIBCXX_3.4.29 and the driver's libcuda there)
#   build-gpu-pack/gpu_bench    kernel timings (tests/gpu/tools/gpu_bench.cpp), built the same way
#   build-gpu-pack/googletest   GoogleTest's sources (Debian's /usr/src/googletest), for scripts/gpu_check.sh
#                               --build, which rebuilds the kernels with the GPU machine's own nvcc
#   build-gpu-pack/MANIFEST     commit, nvcc version, sizes, sha256
# Then prints the device tool's carry list. build-gpu-pack/ is git-ignored (/build*/).
#   scripts/gpu_pack.sh
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

rm -rf "$PACK"
mkdir -p "$PACK"
cp "$ROOT/build-cuda/gpu/gpu_tests" "$ROOT/build-cuda/gpu/gpu_bench" "$PACK/"
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
  (cd "$PACK" && sha256sum gpu_tests gpu_bench)
} >"$PACK/MANIFEST"
cat "$PACK/MANIFEST"
echo "size: $(du -sh "$PACK" | cut -f1) (the device tool carries at most 64 MiB with the working tree)"
echo
echo "carry: [\"build-gpu-pack\"]"
echo "command: scripts/gpu_check.sh \$OUT      (timeout_s 540; docs/cuda.md)"
