#!/usr/bin/env bash
# The main job on the default model: what the model is, a greedy continuation, and its perplexity on
# a public-domain text (Jane Austen, Persuasion ch. 1-2), which tests/parity checks against the
# Hugging Face transformers reference.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVSTASH="${KVSTASH_BIN:-$ROOT/build/kvstash}"
TEXT="$ROOT/tests/fixtures/text/persuasion_ch1-2.txt"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*" >&2; }

step kvstash info
"$KVSTASH" info

step kvstash generate -p "The capital of France is" -n 24 --timings
"$KVSTASH" generate -p "The capital of France is" -n 24 --timings

step kvstash perplexity -f tests/fixtures/text/persuasion_ch1-2.txt --ctx 256
"$KVSTASH" perplexity -f "$TEXT" --ctx 256
