#!/usr/bin/env bash
# Cross-builds kvstash for 64-bit ARM Linux and runs its tests there under qemu-user (issue 32).
#   scripts/arm64_check.sh [BUILD_DIR]     default: build-arm64
# Needs Debian's g++-aarch64-linux-gnu, qemu-user and the arm64 builds of the libraries (scripts/setup.sh installs
# them on x86-64); uses cmake/toolchains/aarch64-linux-gnu.cmake. Builds the library and the test executables of
# the subset below only (no CLI, server, Python module or benchmarks), then runs under qemu-aarch64:
#   - the unit tests of label unit_qemu (KVSTASH_QEMU_UNIT in tests/CMakeLists.txt: kernels against their scalar
#     definitions, formats, KV cache, state files, tokenizer, sampler), among them Numerics.PinnedLogitsOfThisPath:
#     whole-model final logits of six tiny models (f16, q8_0, q4_K, q6_K, q4_0, q4_1; 300 tokens in three chunks),
#     hashed and compared with the pins recorded on x86-64: on ARM the scalar path, the NEON path and the NEON path
#     without the dot-product instructions (KVSTASH_ISA=neon-nodotprod, in a child process) must give x86's bits;
#     every kernel test compares scalar and neon (and neon-nodotprod where it runs children) with the scalar
#     reference bitwise, unit_matmul_int8_neon both NEON integer kernels in one process;
#   - the parity tests against the committed transformers / llama.cpp fixtures on the tiny models and SmolLM2's
#     tokenizer (KVSTASH_QEMU_PARITY in tests/CMakeLists.txt, label parity_qemu), and parity.CrossCpuLogits: SmolLM2's
#     final logits on 64 tokens, equal to the pin recorded on x86-64's scalar path.
# The heavy parity suites (Gemma 3 270M, batch invariance, long context: minutes on x86, hours under qemu) stay on
# x86; what they check is the same scalar arithmetic that the pins above compare across the two architectures.
# Exit status: ctest's (0 = every test passed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${1:-$ROOT/build-arm64}"
JOBS="$(nproc)"

for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  if ! command -v "$tool" >/dev/null; then
    echo "arm64_check: $tool not found: run scripts/setup.sh (installs g++-aarch64-linux-gnu, qemu-user and the" \
         "arm64 libraries)" >&2
    exit 2
  fi
done

LAUNCHER=(); command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
echo "==> arm64: configure ($BUILD)" >&2
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DKVSTASH_BENCH=OFF -DKVSTASH_PYTHON=OFF "${LAUNCHER[@]}" >/dev/null
echo "==> arm64: build (library, the test executables of labels unit_qemu and parity_qemu)" >&2
cmake --build "$BUILD" -j"$JOBS" --target qemu_tests
echo "==> arm64: tests under qemu-aarch64 (labels unit_qemu, parity_qemu)" >&2
# One emulator per test executable (ctest --test-dir "$BUILD" -L _qemu starts one per test case: 1,500 qemu start-ups,
# two thirds of its time), $JOBS at a time; each one's output in $BUILD/qemu-logs/, printed when it fails.
# The default model's unit tests are left to x86 (as in the sanitizer stage): the parity tests check it here.
# AttentionChunks (long contexts: a minute on x86, hours under qemu) is left to x86 too.
QEMU=(qemu-aarch64 -cpu max)
[ -e /lib/ld-linux-aarch64.so.1 ] || QEMU+=(-L /usr/aarch64-linux-gnu)  # as cmake/toolchains/aarch64-linux-gnu.cmake
LOGS="$BUILD/qemu-logs"
rm -rf "$LOGS" && mkdir -p "$LOGS"
run_one() {
  local bin="$1" name skip=0
  name="$(basename "$bin")"
  [[ "$name" == unit_* ]] && skip=1
  local start=$SECONDS
  if KVSTASH_SKIP_DEFAULT_MODEL_TESTS=$skip "${QEMU[@]}" "$bin" --gtest_brief=1 --gtest_filter='-AttentionChunks.*' \
       > "$LOGS/$name.log" 2>&1; then
    echo "arm64: $name passed ($((SECONDS - start)) s)"
  else
    echo "arm64: $name FAILED ($((SECONDS - start)) s):"; cat "$LOGS/$name.log"; return 1
  fi
}
export -f run_one; export LOGS; export QEMU_CMD="${QEMU[*]}"
# shellcheck disable=SC2016
xargs -P "$JOBS" -I{} bash -c 'QEMU=($QEMU_CMD); run_one "$1"' _ {} < "$BUILD/qemu_tests.txt"
