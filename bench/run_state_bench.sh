#!/usr/bin/env bash
# Saved states (issue 4), end to end: builds kvstash_state_bench if needed, runs it and llama.cpp
# (bench/state_llamacpp.py, through llama-cpp-python) alternately for ROUNDS rounds on the same token
# ids, and prints the tables of docs/benchmarks-history.md ("Saved states"). JSON of every round and the
# table are kept in $BUILD/state-bench/.
#
#   bench/run_state_bench.sh                 # defaults below
#   ROUNDS=1 REPEATS=2 SIZES=512,2048 bench/run_state_bench.sh
#   THROUGHPUT_ONLY=1 ROUNDS=3 bench/run_state_bench.sh   # only save / load throughput (a few minutes)
#
# THROUGHPUT_ONLY=1 runs only the file throughput part: per size, save and load (in process and in a
# fresh process) beside `cat FILE > /dev/null` and a read(2) loop, and llama.cpp's save / load, rounds
# alternating the engines. The state files are kept in $OUT and reused by the next run when they hold
# the same tokens, so only the first run prefills (minutes for 8184 tokens).
#
# Environment: BUILD (build-sb), MODEL, TEXT, THREADS (2), SIZES (512,2048,8184), SUFFIX (8), CTX (8192),
# ROUNDS (2), REPEATS (5 per round and process), FULL_REPEATS_LONG (1: full recomputes per round of
# prefixes over 4096 tokens, minutes each on 2 cores), COLD (fadvise | drop_caches | none),
# PY (/work/venv-bench/bin/python: a Python with llama-cpp-python; without one only kvstash runs).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build-sb}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
TEXT=${TEXT:-tests/fixtures/text/persuasion_ch1-2.txt}
THREADS=${THREADS:-2}
SIZES=${SIZES:-512,2048,8184}
SUFFIX=${SUFFIX:-8}
CTX=${CTX:-8192}
ROUNDS=${ROUNDS:-2}
REPEATS=${REPEATS:-5}
FULL_REPEATS_LONG=${FULL_REPEATS_LONG:-1}
COLD=${COLD:-fadvise}
THROUGHPUT_ONLY=${THROUGHPUT_ONLY:-0}
PY=${PY:-/work/venv-bench/bin/python}
OUT=${OUT:-$BUILD/state-bench}
BIN=$BUILD/bench/kvstash_state_bench

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >&2
fi
cmake --build "$BUILD" -j"$(nproc)" --target kvstash_state_bench >&2
mkdir -p "$OUT"
rm -f "$OUT"/kvstash_*.json "$OUT"/llama_*.json

LLAMA=1
if ! "$PY" -c "import llama_cpp" 2>/dev/null; then
  echo "no llama-cpp-python in $PY: kvstash only" >&2
  LLAMA=0
fi

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $(uname -r)" >&2
echo "model: $MODEL; text: $TEXT; threads $THREADS; prefixes $SIZES + $SUFFIX-token suffix; ctx $CTX" >&2

"$BIN" -m "$MODEL" -f "$TEXT" --sizes "$SIZES" --suffix "$SUFFIX" --ctx "$CTX" --dump-tokens "$OUT/tokens.txt"

load() { cut -d' ' -f1-3 /proc/loadavg; }
MODE=()
((THROUGHPUT_ONLY)) && MODE=(--throughput-only)
run_kvstash() {
  echo "round $1: kvstash (load average $(load))" >&2
  "$BIN" "${MODE[@]}" -m "$MODEL" -t "$THREADS" -f "$TEXT" --sizes "$SIZES" --suffix "$SUFFIX" --ctx "$CTX" \
    -r "$REPEATS" --full-repeats-long "$FULL_REPEATS_LONG" --cold "$COLD" --dir "$OUT" > "$OUT/kvstash_$1.json"
}
run_llama() {
  echo "round $1: llama.cpp (load average $(load))" >&2
  "$PY" bench/state_llamacpp.py run "${MODE[@]}" -m "$MODEL" -t "$THREADS" --tokens "$OUT/tokens.txt" --sizes "$SIZES" \
    --suffix "$SUFFIX" --ctx "$CTX" -r "$REPEATS" --full-repeats-long "$FULL_REPEATS_LONG" --dir "$OUT" \
    > "$OUT/llama_$1.json"
}
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then
    run_kvstash "$r"; ((LLAMA)) && run_llama "$r"
  else
    ((LLAMA)) && run_llama "$r"; run_kvstash "$r"
  fi
done

echo "done (load average $(load))" >&2
LLAMA_JSON=()
((LLAMA)) && LLAMA_JSON=("$OUT"/llama_*.json)
python3 bench/state_llamacpp.py report "${MODE[@]}" --kvstash "$OUT"/kvstash_*.json --llama "${LLAMA_JSON[@]}" | tee "$OUT/table.md"
((THROUGHPUT_ONLY)) || rm -f "$OUT"/*.kvs "$OUT"/*.seq
