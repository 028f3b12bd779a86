#!/usr/bin/env bash
# The main job on the default model:
#   1. the model answers a question through its chat template;
#   2. it reads a public-domain text once (Jane Austen, Persuasion ch. 1-2, ~6,400 tokens) and saves
#      its state; a new process loads that state and writes three different continuations — each
#      bit-identical to recomputing the whole text — and the time to first token after restoring the
#      state (load + the question) is printed next to recomputing the whole text;
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

step "time to first token: recompute the whole text vs restore the saved state (then the question)"
{ cat "$TEXT"; printf '%s' "$Q1"; } > "$WORK/whole.txt"
t2=$(now)
"$KVSTASH" generate -f "$WORK/whole.txt" -n 1 --temp 0 --timings > /dev/null 2> "$WORK/full.log"
t3=$(now)
"$KVSTASH" generate --state "$WORK/book.kvs" -p "$Q1" -n 1 --temp 0 --timings > /dev/null 2> "$WORK/restore.log"
t4=$(now)
# In process (--timings): the full run's time to first token; the restore's load_state time plus its
# question's time to first token. Around them (new process): start, model load, tokenizing.
full_ttft=$(sed -n 's/.*time to first token \([0-9.]*\) s.*/\1/p' "$WORK/full.log")
load_s=$(sed -n 's/^state: .* in \([0-9.]*\) s$/\1/p' "$WORK/restore.log")
suffix_s=$(sed -n 's/.*time to first token \([0-9.]*\) s.*/\1/p' "$WORK/restore.log")
n_state=$(sed -n 's/^state: \([0-9]*\) tokens loaded.*/\1/p' "$WORK/restore.log")
n_question=$(sed -n 's/^tokens: .* reused from the state, \([0-9]*\) computed$/\1/p' "$WORK/restore.log")
awk -v t0="$t0" -v t1="$t1" -v t2="$t2" -v t3="$t3" -v t4="$t4" -v full="$full_ttft" -v load="$load_s" \
  -v suffix="$suffix_s" -v n="$n_state" -v nq="$n_question" 'BEGIN {
  pre = t1 - t0; full_p = t3 - t2; st_p = t4 - t3; restore = load + suffix
  printf "%-46s %7.3f s\n", "prefill + save, once:", pre
  printf "%-46s %7.3f s\n", sprintf("first token, recomputing all %d tokens:", n + nq), full
  printf "%-46s %7.3f s (load %.3f s + %d-token question %.3f s)\n", \
    "first token after restoring the saved state:", restore, load, nq, suffix
  printf "%-46s %7.1fx\n", "speed-up:", full / restore
  printf "(each in a new process, start-up and model load included: %.2f s vs %.2f s, %.1fx)\n", full_p, st_p, \
    full_p / st_p }'

step kvstash perplexity -f tests/fixtures/text/persuasion_ch1-2.txt --ctx 256
"$KVSTASH" perplexity -f "$TEXT" --ctx 256 | tail -n 3
