#!/usr/bin/env bash
# Configures a clang libFuzzer build, (re)writes the seed corpus and fuzzes the state file reader.
#   tests/fuzz/run_state_fuzz.sh [seconds=60] [extra libFuzzer flags, e.g. -jobs=4 -workers=4]
# Environment as for run_gguf_fuzz.sh: KVSTASH_FUZZ_BUILD (build dir, default <repo>/build-fuzz),
# KVSTASH_JOBS (make -j), KVSTASH_FUZZ_WERROR (default OFF).
# New interesting inputs go to $KVSTASH_FUZZ_BUILD/corpus-state_file (the committed seeds stay as they
# are); crashes go to $KVSTASH_FUZZ_BUILD/artifacts-state_file/ and the script exits non-zero.
set -euo pipefail
seconds="${1:-60}"
shift || true
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${KVSTASH_FUZZ_BUILD:-$root/build-fuzz}"

CXX=clang++ cmake -S "$root" -B "$build" -DKVSTASH_FUZZ=ON -DKVSTASH_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DKVSTASH_WERROR="${KVSTASH_FUZZ_WERROR:-OFF}" >/dev/null
cmake --build "$build" -j"${KVSTASH_JOBS:-$(nproc)}" --target fuzz_state_file fuzz_state_file_seeds

"$build/tests/fuzz/fuzz_state_file_seeds" "$root/tests/fuzz/corpus/state_file"
mkdir -p "$build/corpus-state_file" "$build/artifacts-state_file"
# -rss_limit_mb: the reader may allocate at most 256x a compressed section's size; inputs are small.
"$build/tests/fuzz/fuzz_state_file" -max_total_time="$seconds" -rss_limit_mb=2048 \
  -artifact_prefix="$build/artifacts-state_file/" "$@" "$build/corpus-state_file" "$root/tests/fuzz/corpus/state_file"
