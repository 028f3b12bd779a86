#!/usr/bin/env bash
# Runs every test: sets up (packages, default model, Release build), runs all CTest suites (unit,
# parity against the committed reference fixtures, end-to-end CLI tests), the Python package's tests
# (pytest tests/python, which also runs examples/python/), then rebuilds and runs the
# unit tests under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="$(nproc)"

"$ROOT/scripts/setup.sh" --no-demo

echo "==> source checks (format, file length, layers)" >&2
"$ROOT/scripts/check_format.sh"
"$ROOT/scripts/check_layers.sh"

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
