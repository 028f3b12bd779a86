#!/usr/bin/env bash
# Configures a clang libFuzzer build and fuzzes the HTTP request parser (JSON bodies of /v1/completions,
# /v1/chat/completions and /v1/states) from the committed seeds in tests/fuzz/corpus/request.
#   tests/fuzz/run_request_fuzz.sh [seconds=60] [extra libFuzzer flags, e.g. -jobs=4 -workers=4]
# Environment, corpus and crash folders: see fuzz_common.sh (build dir default <repo>/build-fuzz).
source "$(dirname "${BASH_SOURCE[0]}")/fuzz_common.sh"
seconds="${1:-60}"
shift || true

fuzz_build fuzz_request
# -max_len: request bodies are small JSON documents; 4 KiB leaves room for nesting and long strings.
fuzz_run request "$seconds" -max_len=4096 -dict="$root/tests/fuzz/request.dict" "$@"
