# Sourced by run.sh: the connection probes of issue 19 item 1 (slow, idle and oversized clients). Uses
# run.sh's record / start_server / stop_server / http and its variables (CLI, WORK, PORT, SERVER_PID).
# Sizes: CONN_IDLE idle connections (500), CONN_TRICKLE trickling ones (100), CONN_CONCURRENT clients
# (32, 64 with --long), CONN_HOLD seconds the idle and trickling connections are held (1, 20 with --long).
CONN_KEY="reliability-key"
CONN_IDLE="${CONN_IDLE:-500}"
CONN_TRICKLE="${CONN_TRICKLE:-100}"
CONN_CONCURRENT="${CONN_CONCURRENT:-32}"
CONN_HOLD="${CONN_HOLD:-1}"
CONN_FDS=()

peak_rss_kib() { awk '/VmHWM/ {print $2}' "/proc/$SERVER_PID/status"; }
threads_of_server() { awk '/Threads/ {print $2}' "/proc/$SERVER_PID/status"; }
# open_connections N: N TCP connections to the server, kept in CONN_FDS (bash's /dev/tcp, no client tool).
open_connections() {
  local i fd
  for i in $(seq "$1"); do
    exec {fd}<> "/dev/tcp/127.0.0.1/$PORT" || return 1
    CONN_FDS+=("$fd")
  done
}
close_connections() {
  local fd
  for fd in "${CONN_FDS[@]}"; do exec {fd}>&-; done
  CONN_FDS=()
}
# served LABEL PROBE: /health (no key) and an authenticated completion answer, /health within 2 s, and a
# request without the key is still refused; one record per check.
served() {
  local probe="$1" label="$2" t code
  t="$(curl -s -m 10 -o /dev/null -w '%{http_code} %{time_total}' "http://127.0.0.1:$PORT/health")"
  [ "${t% *}" = 200 ] && awk -v s="${t#* }" 'BEGIN { exit !(s < 2) }'
  record "$probe" $((! $?)) "$label: /health: HTTP/seconds $t"
  echo "  $probe: /health in ${t#* } s $label" >> "$WORK/latency.log"
  code="$(http POST /v1/completions -m 20 -H "Authorization: Bearer $CONN_KEY" -d '{"prompt": "Hello", "max_tokens": 2}')"
  [ "$code" = 200 ]
  record "$probe" $((! $?)) "$label: authenticated completion: HTTP $code"
  code="$(http GET /v1/models -m 10)"
  [ "$code" = 401 ]
  record "$probe" $((! $?)) "$label: no key: HTTP $code"
}

probe_connection_timeouts() {  # a server of its own, with short timeouts
  start_server --idle-timeout 2 --read-timeout 2 || { record timeouts 0 "no server"; return; }
  local idle partial start elapsed_idle elapsed_partial
  exec {idle}<> "/dev/tcp/127.0.0.1/$PORT"
  exec {partial}<> "/dev/tcp/127.0.0.1/$PORT"
  printf 'GET /health HTTP/1.1\r\nHost: x\r\nX-Unfinished: ' >&"$partial"
  start=$SECONDS
  # Both are closed by the server (EOF) after about 2 s; cat waits for that, timeout 12 s in case not.
  timeout 12 cat <&"$idle" > /dev/null; elapsed_idle=$((SECONDS - start))
  timeout 12 cat <&"$partial" > /dev/null; elapsed_partial=$((SECONDS - start))
  exec {idle}>&- {partial}>&-
  [ "$elapsed_idle" -le 6 ]
  record timeouts $((! $?)) "a connection that sent nothing was open for $elapsed_idle s (--idle-timeout 2)"
  [ "$elapsed_partial" -le 6 ]
  record timeouts $((! $?)) "a stalled request head was open for $elapsed_partial s (--read-timeout 2)"
  stop_server
}

probe_connections() {  # a server of its own, with an API key and timeouts longer than the probe
  start_server --api-key "$CONN_KEY" --idle-timeout 60 --read-timeout 60 || { record idle_connections 0 "no server"; return; }
  local before code peak
  # A 1 GiB chunked body and a 1 GiB body with Content-Length: refused before they are read.
  before="$(peak_rss_kib)"
  code="$(head -c 1073741824 /dev/zero | curl -s -o /dev/null -w '%{http_code}' -X POST -T - \
            -H 'Transfer-Encoding: chunked' -H "Authorization: Bearer $CONN_KEY" "http://127.0.0.1:$PORT/v1/completions")"
  peak="$(peak_rss_kib)"
  [ "$code" = 411 ] && [ $((peak - before)) -lt 65536 ]
  record oversize_body $((! $?)) "1 GiB chunked POST: HTTP $code, peak RSS $before -> $peak KiB"
  code="$(head -c 1073741824 /dev/zero | curl -s -o /dev/null -w '%{http_code}' -X PUT -T - \
            -H 'Transfer-Encoding: chunked' -H "Authorization: Bearer $CONN_KEY" "http://127.0.0.1:$PORT/v1/states/big/file")"
  peak="$(peak_rss_kib)"
  [ "$code" = 411 ] && [ $((peak - before)) -lt 65536 ]
  record oversize_body $((! $?)) "1 GiB chunked state upload: HTTP $code, peak RSS $before -> $peak KiB"
  truncate -s 1G "$WORK/sparse-1g"  # a sparse file: curl sends its size as Content-Length
  code="$(curl -s -o /dev/null -w '%{http_code}' -X POST -T "$WORK/sparse-1g" -H "Authorization: Bearer $CONN_KEY" \
            "http://127.0.0.1:$PORT/v1/completions")"
  peak="$(peak_rss_kib)"
  [ "$code" = 413 ] && [ $((peak - before)) -lt 65536 ]
  record oversize_body $((! $?)) "1 GiB POST with Content-Length: HTTP $code, peak RSS $before -> $peak KiB"

  # A client that sends its 1 GiB body whatever the answer: without the key (401), and with it but over
  # --max-body (413). The connection must be closed with the body unread (kept open, the server would
  # read the body as the next request line, into memory).
  local fd auth want
  for auth in "" "Authorization: Bearer $CONN_KEY\r\n"; do
    want=401; [ -n "$auth" ] && want=413
    exec {fd}<> "/dev/tcp/127.0.0.1/$PORT"
    ( printf "POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 1073741824\r\n\r\n"
      head -c 1073741824 /dev/zero ) >&"$fd" 2>/dev/null
    code="$(timeout 10 head -c 12 <&"$fd" | cut -c10-12)"
    exec {fd}>&-
    peak="$(peak_rss_kib)"
    [ "$code" = "$want" ] && [ $((peak - before)) -lt 65536 ]
    record oversize_body $((! $?)) "1 GiB body sent regardless: HTTP $code (want $want), peak RSS $before -> $peak KiB"
  done

  # Idle connections: every one holds a server thread, none locks the others out.
  if ! open_connections "$CONN_IDLE"; then
    record idle_connections 0 "could not open $CONN_IDLE connections (ulimit -n $(ulimit -n))"
  else
    sleep 0.5
    served idle_connections "with $CONN_IDLE idle connections"
    sleep "$CONN_HOLD"
    served idle_connections "with $CONN_IDLE idle connections, ${CONN_HOLD} s later"
    echo "  idle_connections: $(threads_of_server) server threads with $CONN_IDLE idle connections" >> "$WORK/latency.log"
  fi
  close_connections

  # Trickling request heads: a header line every 0.5 s on each connection (under --read-timeout).
  open_connections "$CONN_TRICKLE" || record trickle 0 "could not open $CONN_TRICKLE connections"
  for fd in "${CONN_FDS[@]}"; do printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\n' >&"$fd"; done
  ( while :; do for fd in "${CONN_FDS[@]}"; do printf 'X-Slow: a\r\n' >&"$fd" 2>/dev/null; done; sleep 0.5; done ) &
  local trickler=$!
  sleep 1
  served trickle "with $CONN_TRICKLE connections trickling headers"
  sleep "$CONN_HOLD"
  served trickle "with $CONN_TRICKLE connections trickling headers, ${CONN_HOLD} s later"
  kill "$trickler"; wait "$trickler" 2>/dev/null
  close_connections

  # Concurrent clients.
  local codes i ok
  codes="$(for i in $(seq "$CONN_CONCURRENT"); do http POST /v1/completions -H "Authorization: Bearer $CONN_KEY" \
             -d "{\"prompt\": \"Number $i\", \"max_tokens\": 2}" & done; wait)"
  ok="$(grep -o 200 <<< "$codes" | wc -l)"
  [ "$ok" = "$CONN_CONCURRENT" ]
  record concurrent_clients $((! $?)) "$ok of $CONN_CONCURRENT answered 200: $codes"
  code="$(http GET /health)"; [ "$code" = 200 ]; record concurrent_clients $((! $?)) "health after: HTTP $code"
  stop_server
}
