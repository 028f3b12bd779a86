#!/usr/bin/env bash
# Configures a clang libFuzzer build, (re)writes the seed corpus and fuzzes the state file reader.
#   tests/fuzz/run_state_fuzz.sh [seconds=60] [extra libFuzzer flags, e.g. -jobs=4 -workers=4]
# Environment, corpus and crash folders: see fuzz_common.sh (build dir default <repo>/build-fuzz).
source "$(dirname "${BASH_SOURCE[0]}")/fuzz_common.sh"
seconds="${1:-60}"
shift || true

fuzz_build fuzz_state_file fuzz_state_file_seeds
"$build/tests/fuzz/fuzz_state_file_seeds" "$root/tests/fuzz/corpus/state_file"
# -rss_limit_mb: the reader may allocate at most 256x a compressed section's size; inputs are small.
fuzz_run state_file "$seconds" -rss_limit_mb=2048 "$@"
