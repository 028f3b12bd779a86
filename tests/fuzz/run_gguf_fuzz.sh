#!/usr/bin/env bash
# Configures a clang libFuzzer build, (re)writes the seed corpus and fuzzes the GGUF reader.
#   tests/fuzz/run_gguf_fuzz.sh [seconds=60] [extra libFuzzer flags, e.g. -jobs=4 -workers=4]
# Environment: KVSTASH_FUZZ_BUILD (build dir, default <repo>/build-fuzz), KVSTASH_JOBS (make -j),
# KVSTASH_FUZZ_WERROR (default OFF: warnings are enforced by the gcc build; clang warns about other
# things, e.g. GCC-only pragmas, and this build exists to find crashes, not warnings).
# New interesting inputs go to $KVSTASH_FUZZ_BUILD/corpus-gguf (the committed seeds stay as they are);
# crashes go to $KVSTASH_FUZZ_BUILD/artifacts-gguf/ and the script exits non-zero.
set -euo pipefail
seconds="${1:-60}"
shift || true
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${KVSTASH_FUZZ_BUILD:-$root/build-fuzz}"

CXX=clang++ cmake -S "$root" -B "$build" -DKVSTASH_FUZZ=ON -DKVSTASH_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DKVSTASH_WERROR="${KVSTASH_FUZZ_WERROR:-OFF}" >/dev/null
cmake --build "$build" -j"${KVSTASH_JOBS:-$(nproc)}" --target fuzz_gguf fuzz_gguf_seeds

"$build/tests/fuzz/fuzz_gguf_seeds" "$root/tests/fuzz/corpus/gguf"
mkdir -p "$build/corpus-gguf" "$build/artifacts-gguf"
"$build/tests/fuzz/fuzz_gguf" -max_total_time="$seconds" -dict="$root/tests/fuzz/gguf.dict" \
  -artifact_prefix="$build/artifacts-gguf/" "$@" "$build/corpus-gguf" "$root/tests/fuzz/corpus/gguf"
