#!/usr/bin/env bash
# Configures a clang libFuzzer build, (re)writes the seed corpus and fuzzes the prefix cache's block file
# reader (tests/fuzz/prefix_block_fuzz.cpp).
#   tests/fuzz/run_prefix_block_fuzz.sh [seconds=60] [extra libFuzzer flags, e.g. -jobs=4 -workers=4]
# Environment: KVSTASH_FUZZ_BUILD (build dir, default <repo>/build-fuzz), KVSTASH_JOBS (make -j),
# KVSTASH_FUZZ_WERROR (default OFF: warnings are enforced by the gcc build; clang warns about other
# things, e.g. GCC-only pragmas, and this build exists to find crashes, not warnings).
# New interesting inputs go to $KVSTASH_FUZZ_BUILD/corpus-prefix_block (the committed seeds stay as they are);
# crashes go to $KVSTASH_FUZZ_BUILD/artifacts-prefix_block/ and the script exits non-zero.
set -euo pipefail
seconds="${1:-60}"
shift || true
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${KVSTASH_FUZZ_BUILD:-$root/build-fuzz}"

CXX=clang++ cmake -S "$root" -B "$build" -DKVSTASH_FUZZ=ON -DKVSTASH_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DKVSTASH_WERROR="${KVSTASH_FUZZ_WERROR:-OFF}" >/dev/null
cmake --build "$build" -j"${KVSTASH_JOBS:-$(nproc)}" --target fuzz_prefix_block fuzz_prefix_block_seeds

"$build/tests/fuzz/fuzz_prefix_block_seeds" "$root/tests/fuzz/corpus/prefix_block"
mkdir -p "$build/corpus-prefix_block" "$build/artifacts-prefix_block"
"$build/tests/fuzz/fuzz_prefix_block" -max_total_time="$seconds" \
  -artifact_prefix="$build/artifacts-prefix_block/" "$@" "$build/corpus-prefix_block" "$root/tests/fuzz/corpus/prefix_block"
