# Sourced by tests/fuzz/run_*_fuzz.sh: the clang libFuzzer build and run they share.
# Environment: KVSTASH_FUZZ_BUILD (build dir, default <repo>/build-fuzz), KVSTASH_JOBS (make -j),
# KVSTASH_FUZZ_WERROR (default OFF: warnings are enforced by the gcc build; clang warns about other
# things, e.g. GCC-only pragmas, and this build exists to find crashes, not warnings).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${KVSTASH_FUZZ_BUILD:-$root/build-fuzz}"

# fuzz_build TARGET...: configures the clang fuzz build and builds the targets.
fuzz_build() {
  CXX=clang++ cmake -S "$root" -B "$build" -DKVSTASH_FUZZ=ON -DKVSTASH_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DKVSTASH_WERROR="${KVSTASH_FUZZ_WERROR:-OFF}" >/dev/null
  cmake --build "$build" -j"${KVSTASH_JOBS:-$(nproc)}" --target "$@"
}

# fuzz_run NAME SECONDS [libFuzzer flags...]: runs fuzz_NAME for SECONDS on $build/corpus-NAME (where
# new interesting inputs go) and the committed seeds in tests/fuzz/corpus/NAME (left as they are);
# crashes go to $build/artifacts-NAME/ and the calling script exits non-zero.
fuzz_run() {
  local name="$1" seconds="$2"
  shift 2
  mkdir -p "$build/corpus-$name" "$build/artifacts-$name"
  "$build/tests/fuzz/fuzz_$name" -max_total_time="$seconds" -artifact_prefix="$build/artifacts-$name/" "$@" \
    "$build/corpus-$name" "$root/tests/fuzz/corpus/$name"
}
