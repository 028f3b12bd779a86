#!/usr/bin/env bash
# Configures a clang libFuzzer build, (re)writes the seed corpus and fuzzes the GGUF reader.
#   tests/fuzz/run_gguf_fuzz.sh [seconds=60] [extra libFuzzer flags, e.g. -jobs=4 -workers=4]
# Environment, corpus and crash folders: see fuzz_common.sh (build dir default <repo>/build-fuzz).
source "$(dirname "${BASH_SOURCE[0]}")/fuzz_common.sh"
seconds="${1:-60}"
shift || true

fuzz_build fuzz_gguf fuzz_gguf_seeds
"$build/tests/fuzz/fuzz_gguf_seeds" "$root/tests/fuzz/corpus/gguf"
fuzz_run gguf "$seconds" -dict="$root/tests/fuzz/gguf.dict" "$@"
