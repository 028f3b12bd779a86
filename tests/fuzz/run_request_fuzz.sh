#!/usr/bin/env bash
# Configures a clang libFuzzer build and fuzzes the HTTP request parser (JSON bodies of /v1/completions,
# /v1/chat/completions and /v1/states) from the committed seeds in tests/fuzz/corpus/request.
#   tests/fuzz/run_request_fuzz.sh [seconds=60] [extra libFuzzer flags, e.g. -jobs=4 -workers=4]
# Environment as for run_gguf_fuzz.sh: KVSTASH_FUZZ_BUILD (build dir, default <repo>/build-fuzz),
# KVSTASH_JOBS (make -j), KVSTASH_FUZZ_WERROR (default OFF).
# New interesting inputs go to $KVSTASH_FUZZ_BUILD/corpus-request (the committed seeds stay as they are);
# crashes go to $KVSTASH_FUZZ_BUILD/artifacts-request/ and the script exits non-zero.
set -euo pipefail
seconds="${1:-60}"
shift || true
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${KVSTASH_FUZZ_BUILD:-$root/build-fuzz}"

CXX=clang++ cmake -S "$root" -B "$build" -DKVSTASH_FUZZ=ON -DKVSTASH_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DKVSTASH_WERROR="${KVSTASH_FUZZ_WERROR:-OFF}" >/dev/null
cmake --build "$build" -j"${KVSTASH_JOBS:-$(nproc)}" --target fuzz_request

mkdir -p "$build/corpus-request" "$build/artifacts-request"
# -max_len: request bodies are small JSON documents; 4 KiB leaves room for nesting and long strings.
"$build/tests/fuzz/fuzz_request" -max_total_time="$seconds" -max_len=4096 -dict="$root/tests/fuzz/request.dict" \
  -artifact_prefix="$build/artifacts-request/" "$@" "$build/corpus-request" "$root/tests/fuzz/corpus/request"
