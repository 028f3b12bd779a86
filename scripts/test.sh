#!/usr/bin/env bash
# Runs every test: sets up (packages, default model, Release build), runs all CTest suites (unit,
# parity against the committed reference fixtures, end-to-end CLI tests), the Python package's tests
# (pytest tests/python, which also runs examples/python/), then rebuilds and runs the
# unit tests under AddressSanitizer + UndefinedBehaviorSanitizer; last, on x86-64, the ARM64 check
# (scripts/arm64_check.sh: cross build, unit and parity tests under qemu-user).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="$(nproc)"

"$ROOT/scripts/setup.sh" --no-demo

echo "==> source checks (format, file length, layers)" >&2
"$ROOT/scripts/check_format.sh"
"$ROOT/scripts/check_layers.sh"

echo "==> CUDA kernels and GPU tests: compile only (docs/cuda.md)" >&2
# The kernels (src/backends/cuda) and the GPU test binary, alone in build-cuda/ (about 1 minute of nvcc on 2 cores,
# cold), so that they never rot on machines without a GPU. The binary runs too: without a GPU every test skips.
NVCC="$(command -v nvcc || true)"
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -n "$NVCC" ]; then
  GENERATOR=(); command -v ninja >/dev/null && GENERATOR=(-G Ninja)
  [ -f "$ROOT/build-cuda/CMakeCache.txt" ] && GENERATOR=()  # keep the generator it was configured with
  cmake -S "$ROOT/tests/gpu/standalone" -B "$ROOT/build-cuda" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_COMPILER="$NVCC" >/dev/null
  cmake --build "$ROOT/build-cuda" -j"$JOBS"
  "$ROOT/build-cuda/gpu/gpu_tests" --gtest_brief=1
else
  printf '\033[1;31m!!! nvcc not found (PATH, /usr/local/cuda/bin): the CUDA kernels were NOT compiled !!!\033[0m\n' >&2
fi

echo "==> tests (Release build)" >&2
ctest --test-dir "$ROOT/build" --output-on-failure -j"$JOBS" --timeout 1200

echo "==> Python package tests (tests/python, examples/python)" >&2
"$ROOT/.venv/bin/python" -m pytest -q "$ROOT/tests/python"

echo "==> unit tests under ASan + UBSan" >&2
# -O1 -g1 (line tables: sanitizer reports still name file:line) compiles about twice as fast as -O2 -g.
cmake -S "$ROOT" -B "$ROOT/build-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DKVSTASH_SANITIZE=ON >/dev/null
cmake --build "$ROOT/build-asan" -j"$JOBS" --target unit_tests
# The unit tests that run the default model (SmolLM2, ~80% of this stage's time under the sanitizers) ran in the
# Release stage above; here the tiny generated models take the same code paths.
KVSTASH_SKIP_DEFAULT_MODEL_TESTS=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$ROOT/build-asan" --output-on-failure -j"$JOBS" -L unit --timeout 1200

if [ "$(uname -m)" = x86_64 ]; then
  echo "==> ARM64: cross build, unit and parity tests under qemu-user (scripts/arm64_check.sh)" >&2
  "$ROOT/scripts/arm64_check.sh"
fi
