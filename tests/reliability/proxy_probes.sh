# Sourced by run.sh: the front proxy documented in docs/architecture/server.md ("Connections and limits") bounds
# what cpp-httplib 0.11 cannot: the whole time and size of a request head. Runs when nginx is found
# ($KVSTASH_NGINX, or nginx on PATH; the Debian package's binary works unpacked: dpkg -x nginx_*.deb DIR),
# else prints SKIP. nginx runs as this user, in the foreground, with everything under $WORK.
#   proxy_trickle     a request head trickled a header line every 0.5 s: closed within 5 s
#                     (client_header_timeout 2s; kvstash alone keeps it as long as it trickles)
#   proxy_long_header a 64 KiB header line: 400, and the proxy still serves
#   proxy_chunked     a 1 GiB chunked body: 413 from the proxy; a small chunked JSON body: 200 from kvstash
#                     (the proxy buffers it and sends a Content-Length)
#   proxy_stream      a streamed chat completion arrives whole through the proxy ([DONE])
NGINX="${KVSTASH_NGINX:-$(command -v nginx || command -v /usr/sbin/nginx || true)}"

probe_front_proxy() {
  if [ -z "$NGINX" ] || [ ! -x "$NGINX" ]; then
    echo "run.sh: SKIP front proxy probes: no nginx (set KVSTASH_NGINX)"; return
  fi
  start_server || { record proxy_trickle 0 "no server"; return; }
  local dir="$WORK/nginx" nport="" p
  mkdir -p "$dir"
  # Below the ephemeral range (32768-60999), where the client ends of the probes' connections live.
  for p in $(shuf -i 20000-32000 -n 20); do
    (exec 3<> "/dev/tcp/127.0.0.1/$p") 2>/dev/null || { nport=$p; break; }
  done
  cat > "$dir/nginx.conf" <<CONF
daemon off;
master_process off;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 2048; }
http {
    access_log off;
    client_body_temp_path $dir/body; proxy_temp_path $dir/proxy; fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;
    client_header_timeout 2s;
    large_client_header_buffers 4 16k;
    client_max_body_size 64m;
    client_body_timeout 10s;
    keepalive_timeout 5s;
    server {
        listen 127.0.0.1:$nport;
        location / {
            proxy_pass http://127.0.0.1:$PORT;
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_read_timeout 600s;
        }
    }
}
CONF
  "$NGINX" -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" &
  local nginx_pid=$! code up=0
  for _ in $(seq 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$nport/health")" = 200 ] && { up=1; break; }
    sleep 0.1
  done
  if [ "$up" = 0 ]; then
    record proxy_stream 0 "nginx did not start on port $nport: $(tail -2 "$dir/error.log")"
    kill "$nginx_pid" 2>/dev/null; wait "$nginx_pid" 2>/dev/null
    stop_server
    return
  fi

  local fd start elapsed
  exec {fd}<> "/dev/tcp/127.0.0.1/$nport"
  printf 'GET /health HTTP/1.1\r\nHost: x\r\n' >&"$fd"
  ( for _ in $(seq 40); do printf 'X-Slow: a\r\n' >&"$fd" 2>/dev/null || exit 0; sleep 0.5; done ) &
  local trickler=$!
  start=$SECONDS
  timeout 15 cat <&"$fd" > /dev/null; elapsed=$((SECONDS - start))
  kill "$trickler" 2>/dev/null; wait "$trickler" 2>/dev/null
  exec {fd}>&-
  [ "$elapsed" -le 5 ]
  record proxy_trickle $((! $?)) "a trickled request head was open for $elapsed s"

  code="$(curl -s -m 10 -o /dev/null -w '%{http_code}' -H "X-Big: $(head -c 65536 /dev/zero | tr '\0' a)" \
            "http://127.0.0.1:$nport/health")"
  [ "$code" = 400 ]
  record proxy_long_header $((! $?)) "a 64 KiB header line: HTTP $code"
  code="$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$nport/health")"
  [ "$code" = 200 ]
  record proxy_long_header $((! $?)) "/health after it: HTTP $code"

  code="$(head -c 1073741824 /dev/zero | curl -s -m 60 -o /dev/null -w '%{http_code}' -X POST -T - \
            -H 'Transfer-Encoding: chunked' "http://127.0.0.1:$nport/v1/completions")"
  [ "$code" = 413 ]
  record proxy_chunked $((! $?)) "1 GiB chunked POST: HTTP $code"
  code="$(printf '{"prompt": "Hello", "max_tokens": 2}' | curl -s -m 30 -o /dev/null -w '%{http_code}' -X POST -T - \
            -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' "http://127.0.0.1:$nport/v1/completions")"
  [ "$code" = 200 ]
  record proxy_chunked $((! $?)) "small chunked completion: HTTP $code"

  local out
  out="$(curl -s -N -m 60 "http://127.0.0.1:$nport/v1/chat/completions" \
           -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stream": true}')"
  [[ "$out" == *"data: [DONE]"* ]]
  record proxy_stream $((! $?)) "streamed chat through the proxy: ${out:0:200}"

  kill "$nginx_pid" 2>/dev/null; wait "$nginx_pid" 2>/dev/null
  stop_server
}
