#!/usr/bin/env bash
# Configures a clang libFuzzer build, (re)writes the seed corpus and fuzzes the prefix cache's block file
# reader (tests/fuzz/prefix_block_fuzz.cpp).
#   tests/fuzz/run_prefix_block_fuzz.sh [seconds=60] [extra libFuzzer flags, e.g. -jobs=4 -workers=4]
# Environment, corpus and crash folders: see fuzz_common.sh (build dir default <repo>/build-fuzz).
source "$(dirname "${BASH_SOURCE[0]}")/fuzz_common.sh"
seconds="${1:-60}"
shift || true

fuzz_build fuzz_prefix_block fuzz_prefix_block_seeds
"$build/tests/fuzz/fuzz_prefix_block_seeds" "$root/tests/fuzz/corpus/prefix_block"
fuzz_run prefix_block "$seconds" "$@"
