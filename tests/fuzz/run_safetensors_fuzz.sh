#!/usr/bin/env bash
# Configures a clang libFuzzer build, (re)writes the seed corpus and fuzzes the safetensors reader.
#   tests/fuzz/run_safetensors_fuzz.sh [seconds=60] [extra libFuzzer flags]
# Environment, corpus and crash folders: see fuzz_common.sh (build dir default <repo>/build-fuzz).
source "$(dirname "${BASH_SOURCE[0]}")/fuzz_common.sh"
seconds="${1:-60}"
shift || true

fuzz_build fuzz_safetensors
python3 "$root/tests/fuzz/make_safetensors_seeds.py" "$root/tests/fuzz/corpus/safetensors"
fuzz_run safetensors "$seconds" -dict="$root/tests/fuzz/safetensors.dict" "$@"
