#!/usr/bin/env bash
# Configures a clang libFuzzer build and fuzzes the GBNF, JSON Schema and config.json parsers, and the whole
# model-directory reader (issue 34).
# The corpus is the seeds of tests/fuzz/corpus/{grammar,json_schema,hf_config}, each prefixed with the
# byte that selects its parser (structured_fuzz.cpp), written into the build's corpus-structured folder.
#   tests/fuzz/run_structured_fuzz.sh [seconds=60] [extra libFuzzer flags]
# Environment, corpus and crash folders: see fuzz_common.sh (build dir default <repo>/build-fuzz).
source "$(dirname "${BASH_SOURCE[0]}")/fuzz_common.sh"
seconds="${1:-60}"
shift || true

seeds="$build/corpus-structured"
mkdir -p "$seeds" "$root/tests/fuzz/corpus/structured"  # (the latter stays empty: the seeds are prefixed here)
for pair in 0:grammar 1:json_schema 2:hf_config 3:hf_config; do
    selector="${pair%%:*}"
    for f in "$root/tests/fuzz/corpus/${pair#*:}"/*; do
        { printf "\\x0$selector"; cat "$f"; } >"$seeds/${selector}_${pair#*:}_$(basename "$f")"
    done
done

fuzz_build fuzz_structured
fuzz_run structured "$seconds" -max_len=65536 "$@"
