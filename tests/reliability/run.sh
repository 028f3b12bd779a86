#!/usr/bin/env bash
# Replays the hostile-client and crashing-machine probes of issue 19 against the built CLI and server,
# and prints a table of probes with counts tried / passed. Exit 0 only if every try passed.
#   tests/reliability/run.sh BUILD_DIR [--long]     (RELIABILITY_ONLY=files|connections: one group)
# The short form (ctest: reliability.probes) runs each probe a few times; --long (or RELIABILITY_REPEAT=N)
# repeats them. Needs only bash, coreutils, curl and the default model (models/ or $KVSTASH_MODEL); no
# Python. Probes:
#   fifo_input        a FIFO as --state / state info / -m / -f: exit 3 within 10 s, the kind named
#   gguf_overlap      a GGUF whose tensor table moves one tensor onto another's bytes: refused, "overlaps"
#   output_full       a state write that fails part-way (file size limit, as a full disk): exit 5, the
#                     previous file intact, no temporary file left
#   output_special    /dev/full and a FIFO as the output: exit 5, the special file untouched
#   kill_during_save  kvstash prefill SIGKILLed while it writes: the next save to that target leaves no
#                     temporary file
#   dead_temp_startup a dead writer's temporary file in --state-dir: gone once the server has started
#   name_race         8 simultaneous POST /v1/states of one name: one 201, seven 409, no 500
#   put_delete_race   PUT .../file racing DELETE of one name: only 200/201/404
#   null_content      chat messages with content null: 400 naming messages[i].content
#   malformed         malformed JSON / wrong types / unknown routes: 4xx, never 5xx, server alive
#   concurrent        32 simultaneous completions: all 200
# and the connection probes (connection_probes.sh, item 1):
#   timeouts          a silent connection and a stalled request head: closed after --idle-timeout /
#                     --read-timeout (2 s)
#   oversize_body     1 GiB chunked POST and state upload: 411; 1 GiB with Content-Length: 413; a client
#                     sending its 1 GiB body regardless of the 401 / 413: closed; peak RSS grows < 64 MiB
#   idle_connections  500 idle connections open: /health within 2 s, an authenticated completion 200,
#                     a request without the key 401
#   trickle           the same while 100 connections trickle header lines
#   concurrent_clients 32 (64 with --long) simultaneous authenticated completions: all 200
# and the probes of issue 34 (hostile_probes.sh: deep_json, deep_grammar, stacked_repeat, deep_tools,
# slow_head, long_header, control_text, api_key_forms, states_redis_down, deep_config),
# and, when nginx is found, the front proxy's probes (proxy_probes.sh: proxy_trickle, proxy_long_header,
# proxy_chunked, proxy_stream).
set -uo pipefail
BUILD="${1:?usage: run.sh BUILD_DIR [--long]}"
BUILD="$(cd "$BUILD" && pwd)"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REPEAT="${RELIABILITY_REPEAT:-1}"

if [ "${2:-}" = "--long" ]; then
  REPEAT="${RELIABILITY_REPEAT:-10}"
  : "${CONN_CONCURRENT:=64}" "${CONN_HOLD:=20}"
fi
CLI="$BUILD/kvstash"
MODEL="${KVSTASH_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
if [ ! -x "$CLI" ]; then echo "run.sh: no $CLI (build the kvstash_cli target)" >&2; exit 2; fi
if [ ! -f "$MODEL" ]; then echo "run.sh: SKIP: no default model at $MODEL"; exit 0; fi
export KVSTASH_MODEL="$MODEL"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kvstash-reliability-XXXXXX")"
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

declare -A TRIED PASSED
KILLS_WITH_DEBRIS=0  # kills that landed in the write window and left a temporary file
ORDER=()
FAILED_LOG="$WORK/failed.log"
# record PROBE OK [DETAIL]: one try of a probe.
record() {
  local probe="$1" ok="$2" detail="${3:-}"
  [ -z "${TRIED[$probe]+x}" ] && { ORDER+=("$probe"); TRIED[$probe]=0; PASSED[$probe]=0; }
  TRIED[$probe]=$((TRIED[$probe] + 1))
  if [ "$ok" = 1 ]; then PASSED[$probe]=$((PASSED[$probe] + 1)); else echo "FAIL $probe: $detail" | tee -a "$FAILED_LOG" >&2; fi
}
# Hundreds of connections need as many descriptors (here and in the server, which raises its own).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
temp_files_in() { find "$1" -maxdepth 1 -name '.tmp-*' | wc -l; }

start_server() {  # start_server ARGS...: sets PORT and SERVER_PID
  "$CLI" serve --host 127.0.0.1 --port 0 -t 2 "$@" > "$WORK/serve.out" 2> "$WORK/serve.err" &
  SERVER_PID=$!
  for _ in $(seq 600); do
    PORT="$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/serve.out" 2>/dev/null | head -1 | cut -d: -f3)"
    if [ -n "$PORT" ] && curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; then return 0; fi
    sleep 0.1
  done
  echo "run.sh: the server did not start: $(cat "$WORK/serve.err")" >&2
  return 1
}
stop_server() { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; SERVER_PID=""; }
# http METHOD PATH [curl args...]: prints the status code.
http() { local m="$1" p="$2"; shift 2; curl -s -o /dev/null -w '%{http_code}' -X "$m" "http://127.0.0.1:$PORT$p" "$@"; }

probe_fifo_input() {
  local fifo="$WORK/pipe"; rm -f "$fifo"; mkfifo "$fifo"
  local args
  for args in "state info $fifo" "generate --state $fifo -p x -n 1" "generate -m $fifo -p x -n 1" "tokenize -f $fifo"; do
    local start=$SECONDS err rc
    # shellcheck disable=SC2086
    err="$(timeout 10 "$CLI" $args 2>&1 < /dev/null)"; rc=$?
    [ "$rc" = 3 ] && [[ "$err" == *"FIFO (named pipe), not a regular file"* ]] && [ $((SECONDS - start)) -lt 10 ]
    record fifo_input $((! $?)) "kvstash $args: exit $rc: $err"
  done
}

probe_gguf_overlap() {
  local f="$WORK/overlap.gguf" err rc
  cp "$ROOT/tests/fuzz/corpus/gguf/adjacent_tensors.gguf" "$f"
  # Byte 127 is the low byte of tensor 'b's data offset (32): 0 puts b onto a's bytes.
  printf '\x00' | dd of="$f" bs=1 seek=127 conv=notrunc status=none
  err="$(timeout 30 "$CLI" info -m "$f" 2>&1)"; rc=$?
  [ "$rc" = 3 ] && [[ "$err" == *"tensor 'b' (data offset 0, 32 bytes) overlaps tensor 'a'"* ]]
  record gguf_overlap $((! $?)) "exit $rc: $err"
}

probe_output_full() {
  local target="$WORK/full/s.kvs" err rc
  mkdir -p "$WORK/full"; echo previous > "$target"
  err="$(sh -c "trap '' XFSZ; ulimit -f 16; exec \"\$0\" prefill -t 2 -p 'Once upon a time' -o \"\$1\"" "$CLI" "$target" 2>&1)"; rc=$?
  [ "$rc" = 5 ] && [ "$(cat "$target")" = previous ] && [ "$(temp_files_in "$WORK/full")" = 0 ]
  record output_full $((! $?)) "exit $rc: $err"
}

probe_output_special() {
  local fifo="$WORK/out.fifo" err rc
  rm -f "$fifo"; mkfifo "$fifo"
  err="$("$CLI" prefill -t 2 -p x -o /dev/full 2>&1)"; rc=$?
  [ "$rc" = 5 ] && [ -c /dev/full ]
  record output_special $((! $?)) "/dev/full: exit $rc: $err"
  err="$("$CLI" prefill -t 2 -p x -o "$fifo" 2>&1)"; rc=$?
  [ "$rc" = 5 ] && [ -p "$fifo" ]
  record output_special $((! $?)) "FIFO: exit $rc: $err"
}

probe_kill_during_save() {
  local dir="$WORK/kill" text
  mkdir -p "$dir"
  text="$(printf 'It was the best of times, it was the worst of times. %.0s' $(seq 40))"
  "$CLI" prefill -t 2 -p "$text" -o "$dir/s.kvs" > /dev/null 2>&1 &
  local pid=$!
  # Kill it as soon as its temporary file appears (the write window), or when it ends.
  for _ in $(seq 3000); do
    [ "$(temp_files_in "$dir")" != 0 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.005
  done
  kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  [ "$(temp_files_in "$dir")" != 0 ] && KILLS_WITH_DEBRIS=$((KILLS_WITH_DEBRIS + 1))
  "$CLI" prefill -t 2 -p "Once" -o "$dir/s.kvs" > /dev/null 2>&1
  local left; left="$(temp_files_in "$dir")"
  [ "$left" = 0 ]
  record kill_during_save $((! $?)) "$left temporary file(s) left after the next save"
  rm -rf "$dir"
}

probe_dead_temp_startup() {
  local dir="$WORK/states" dead
  mkdir -p "$dir"
  sh -c 'exit 0' & dead=$!; wait "$dead"
  head -c 65536 /dev/zero > "$dir/.tmp-story.kvs-$dead-0-0badf00d"
  start_server --state-dir "$dir" || { record dead_temp_startup 0 "no server"; return; }
  [ "$(temp_files_in "$dir")" = 0 ]
  record dead_temp_startup $((! $?)) "a dead writer's temporary file survived start-up"
}

probe_races() {  # on the running server
  local codes i
  codes="$(for i in $(seq 8); do http POST /v1/states -d "{\"name\": \"race$1\", \"prompt\": \"Client $i\"}" & done; wait)"
  local created conflicts
  created="$(grep -o 201 <<< "$codes" | wc -l)"; conflicts="$(grep -o 409 <<< "$codes" | wc -l)"
  [ "$created" = 1 ] && [ "$conflicts" = 7 ]
  record name_race $((! $?)) "codes: $codes"
  curl -s -o "$WORK/race.kvs" "http://127.0.0.1:$PORT/v1/states/race$1/file"
  codes="$(for i in $(seq 6); do http PUT "/v1/states/contested$1/file" --data-binary "@$WORK/race.kvs" & http DELETE "/v1/states/contested$1" & done; wait)"
  local code
  for code in $(grep -o '...' <<< "$codes"); do
    [[ "$code" =~ ^(200|201|404)$ ]]
    record put_delete_race $((! $?)) "HTTP $code (all: $codes)"
  done
}

probe_requests() {  # on the running server
  local body code
  code="$(http POST /v1/chat/completions -d '{"messages": [{"role": "user", "content": null}]}')"
  [ "$code" = 400 ]
  record null_content $((! $?)) "null content: HTTP $code"
  for body in '{oops' '[]' '{"messages": "x"}' '{"messages": [{"role": "user", "content": 3}]}' \
              '{"prompt": "x", "max_tokens": -1}' '{"prompt": "x", "temperature": "hot"}'; do
    code="$(http POST /v1/completions -d "$body")"
    [[ "$code" =~ ^4 ]]
    record malformed $((! $?)) "$body: HTTP $code"
  done
  code="$(http GET /v1/nowhere)"; [[ "$code" =~ ^4 ]]; record malformed $((! $?)) "unknown route: HTTP $code"
  code="$(http GET /health)"; [ "$code" = 200 ]; record malformed $((! $?)) "health after: HTTP $code"
  local codes i
  codes="$(for i in $(seq 32); do http POST /v1/completions -d "{\"prompt\": \"Number $i\", \"max_tokens\": 2}" & done; wait)"
  local ok; ok="$(grep -o 200 <<< "$codes" | wc -l)"
  [ "$ok" = 32 ]
  record concurrent $((! $?)) "$ok of 32 answered 200: $codes"
}

# shellcheck source=tests/reliability/connection_probes.sh
source "$ROOT/tests/reliability/connection_probes.sh"
# shellcheck source=tests/reliability/proxy_probes.sh
source "$ROOT/tests/reliability/proxy_probes.sh"
# shellcheck source=tests/reliability/hostile_probes.sh
source "$ROOT/tests/reliability/hostile_probes.sh"

# RELIABILITY_ONLY=files|connections runs one group (files: everything but the connection probes).
ONLY="${RELIABILITY_ONLY:-}"
for round in $(seq "$REPEAT"); do
  if [ "$ONLY" != connections ]; then
    probe_fifo_input
    probe_gguf_overlap
    probe_output_full
    probe_output_special
    probe_kill_during_save
    probe_dead_temp_startup
    if [ -n "$SERVER_PID" ]; then
      probe_races "$round"
      probe_requests
      stop_server
    fi
    probe_hostile
  fi
  if [ "$ONLY" != files ]; then
    probe_connection_timeouts
    probe_connections
    probe_front_proxy
  fi
done

printf '%-20s %6s %6s\n' probe tried passed
total_tried=0; total_passed=0
for p in "${ORDER[@]}"; do
  printf '%-20s %6d %6d\n' "$p" "${TRIED[$p]}" "${PASSED[$p]}"
  total_tried=$((total_tried + TRIED[$p])); total_passed=$((total_passed + PASSED[$p]))
done
printf '%-20s %6d %6d\n' total "$total_tried" "$total_passed"
[ -f "$WORK/latency.log" ] && cat "$WORK/latency.log"
[ -n "${TRIED[kill_during_save]+x}" ] && echo "(kill_during_save: $KILLS_WITH_DEBRIS of ${TRIED[kill_during_save]:-0} kills left a temporary file, removed by the next save)"
[ "$total_tried" = "$total_passed" ]
