#!/usr/bin/env bash
# The main job on the default model:
#   1. the model answers a question through its chat template;
#   2. it reads a public-domain text once (Jane Austen, Persuasion ch. 1-2, ~6,400 tokens) and saves
#      its state; a new process loads that state and writes three different continuations — each
#      bit-identical to recomputing the whole text — and the speed-up over recomputing is printed;
#   3. its perplexity on the same text (which the tests check against Hugging Face transformers).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVSTASH="${KVSTASH_BIN:-$ROOT/build/kvstash}"
TEXT="$ROOT/tests/fixtures/text/persuasion_ch1-2.txt"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

step() { printf '\n\033[1m$ %s\033[0m\n' "$*" >&2; }
now() { date +%s.%N; }

step kvstash generate --chat -p "What is the capital of France?" --temp 0 -n 48
"$KVSTASH" generate --chat -p "What is the capital of France?" --temp 0 -n 48

step kvstash prefill -f tests/fixtures/text/persuasion_ch1-2.txt -o book.kvs
t0=$(now)
"$KVSTASH" prefill -f "$TEXT" -o "$WORK/book.kvs"
t1=$(now)

step 'kvstash generate --state book.kvs -p "..." -p "..." -p "..." -n 40   # a new process, three forks of one load'
Q1=$'\n\nIn one sentence, Sir Walter Elliot is'
Q2=$'\n\nThe best thing about Kellynch Hall is'
Q3=$'\n\nChapter 3\n\n'
"$KVSTASH" generate --state "$WORK/book.kvs" -p "$Q1" -p "$Q2" -p "$Q3" -n 40 --temp 0.7 --seed 1 --timings 2> "$WORK/continue.log"
cat "$WORK/continue.log" >&2

step "time to first token: recompute the whole text vs load the saved state"
{ cat "$TEXT"; printf '%s' "$Q1"; } > "$WORK/whole.txt"
t2=$(now)
"$KVSTASH" generate -f "$WORK/whole.txt" -n 1 --temp 0 > /dev/null
t3=$(now)
"$KVSTASH" generate --state "$WORK/book.kvs" -p "$Q1" -n 1 --temp 0 > /dev/null
t4=$(now)
awk -v t0="$t0" -v t1="$t1" -v t2="$t2" -v t3="$t3" -v t4="$t4" 'BEGIN {
  pre = t1 - t0; full = t3 - t2; st = t4 - t3
  printf "prefill + save, once:                 %6.2f s\n", pre
  printf "first token, recomputing everything:  %6.2f s (new process)\n", full
  printf "first token, from the saved state:    %6.2f s (new process)\n", st
  printf "speed-up:                             %6.1fx\n", full / st }'

step kvstash perplexity -f tests/fixtures/text/persuasion_ch1-2.txt --ctx 256
"$KVSTASH" perplexity -f "$TEXT" --ctx 256 | tail -n 3
