#!/usr/bin/env bash
# Memory per idle TLS client connection: Sluice (server.tls) beside nginx (`listen ... ssl`)
# and HAProxy (`bind ... ssl crt`), one worker each, the same EC P-256 certificate, the same
# nginx upstream. For each run and each proxy, a fresh process: its resident set (RSS, summed
# over the process and its children) at start and with IDLE keep-alive TLS connections open,
# each after a full handshake and one request (a Python client, the ssl module, TLS 1.3 by
# default). Prints medians and the growth per connection in KiB.
#
# usage: bench/tls_memory.sh    env: IDLE (5000), RUNS (3), SLUICE_BIN (build/sluice)
# needs: nginx, haproxy, openssl, python3; root, or a hard limit on open files above 2 x IDLE.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
IDLE=${IDLE:-5000}
RUNS=${RUNS:-3}
SLUICE_BIN=${SLUICE_BIN:-$here/build/sluice}
[ -x "$SLUICE_BIN" ] || { echo "tls_memory: $SLUICE_BIN not built" >&2; exit 1; }
want=$((IDLE * 2 + 4096)) hard=$(ulimit -Hn)
[ "$hard" = unlimited ] || [ "$hard" -ge "$want" ] || want=$hard
[ "$want" -ge $((IDLE + 2048)) ] || { echo "tls_memory: open files limit $hard is too low for IDLE=$IDLE" >&2; exit 1; }
ulimit -n "$want"

work=$(mktemp -d)
chmod 755 "$work"  # nginx's worker runs as an unprivileged user
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
chmod 644 "$work/key.pem"
cat "$work/cert.pem" "$work/key.pem" >"$work/both.pem"
ciphers=ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305

read -r up_port sl_port sl_admin ng_port ha_port < <(python3 -c '
import socket
s=[socket.socket() for _ in range(5)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')

wait_port() {
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "port $1 never opened" >&2; tail -n 5 "$work"/*.err >&2 2>/dev/null; exit 1
}

nginx_conf() {  # nginx_conf DIR BODY
  mkdir -p "$1"
  cat >"$1/nginx.conf" <<EOF
worker_processes 1;
worker_rlimit_nofile $want;
pid $1/nginx.pid;
error_log $1/error.log crit;
events { worker_connections $((want - 100)); }
http {
    access_log off;
    client_body_temp_path $1/body; proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/f; uwsgi_temp_path $1/u; scgi_temp_path $1/s;
    keepalive_timeout 300s;
    keepalive_requests 1000000;
    $2
}
EOF
}

nginx_conf "$work/up" "server { listen 127.0.0.1:$up_port; location / { return 200 \"ok\\n\"; } }"
nginx -p "$work/up" -c "$work/up/nginx.conf" -g 'daemon off;' & pids+=($!)
nginx_conf "$work/ng" "upstream b { server 127.0.0.1:$up_port; keepalive 64; }
    server { listen 127.0.0.1:$ng_port ssl; ssl_certificate $work/cert.pem; ssl_certificate_key $work/key.pem;
             ssl_protocols TLSv1.2 TLSv1.3; ssl_ciphers $ciphers; ssl_session_cache none;
             location / { proxy_pass http://b; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
cat >"$work/haproxy.cfg" <<EOF
global
    nbthread 1
    maxconn $(((want - 200) / 2))
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 300s
    timeout server 30s
    timeout http-keep-alive 300s
frontend fe
    bind 127.0.0.1:$ha_port ssl crt $work/both.pem ssl-min-ver TLSv1.2 alpn http/1.1 ciphers $ciphers
    default_backend be
backend be
    server up 127.0.0.1:$up_port
EOF
cat >"$work/sluice.yaml" <<EOF
server:
  listen: "127.0.0.1:0"
  threads: 1
  max_connections: $((want - 100))
  idle_timeout: 300s
  tls:
    listen: "127.0.0.1:$sl_port"
    certificates: [ { cert_file: "$work/cert.pem", key_file: "$work/key.pem" } ]
admin: { listen: "127.0.0.1:$sl_admin" }
upstream: { url: "http://127.0.0.1:$up_port" }
log: { level: warn, access: { path: off } }
EOF

# A fresh proxy per measurement. Sets PROXY_PID and PROXY_PORT.
start_proxy() {
  case $1 in
    sluice) SLUICE_HASH_SECRET=bench-only "$SLUICE_BIN" --config "$work/sluice.yaml" 2>>"$work/sluice.err" &
            PROXY_PORT=$sl_port ;;
    nginx) nginx -p "$work/ng" -c "$work/ng/nginx.conf" -g 'daemon off;' &
           PROXY_PORT=$ng_port ;;
    haproxy) haproxy -db -f "$work/haproxy.cfg" 2>>"$work/haproxy.err" &
             PROXY_PORT=$ha_port ;;
  esac
  PROXY_PID=$!
  pids+=("$PROXY_PID")
  wait_port "$PROXY_PORT"
}
stop_proxy() { kill -TERM "$PROXY_PID"; wait "$PROXY_PID" 2>/dev/null || true; }
wait_port "$up_port"

# The client: opens N TLS connections (at most 100 handshakes at once, under Sluice's
# max_handshakes), one request each, prints "ready" and holds them until its standard input
# closes. Bounded: gives up after 120 s.
cat >"$work/client.py" <<'EOF'
import asyncio, ssl, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
async def one(conns):
    r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
    w.write(b"GET / HTTP/1.1\r\nHost: b\r\n\r\n")
    await r.readuntil(b"ok\n")
    conns.append(w)
async def main():
    conns, sem = [], asyncio.Semaphore(100)
    async def limited():
        async with sem: await one(conns)
    await asyncio.wait_for(asyncio.gather(*(limited() for _ in range(n))), 120)
    print(f"{conns[0].get_extra_info('ssl_object').version()}", file=sys.stderr)
    await asyncio.sleep(1)  # the proxy has read what was sent and settled
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main())
EOF

rss_mib() {  # rss_mib PID: the process and its children
  local total=0 p
  for p in "$1" $(pgrep -P "$1" || true); do
    total=$((total + $(awk '/^VmRSS:/ {print $2}' "/proc/$p/status")))
  done
  awk -v k="$total" 'BEGIN { printf "%.1f", k / 1024 }'
}

measure() {  # measure PID PORT N -> RSS with N idle TLS connections open
  local pid=$1 port=$2 n=$3
  coproc CLIENT { python3 "$work/client.py" "$port" "$n" 2>>"$work/client.err"; }
  local line
  read -r -t 150 line <&"${CLIENT[0]}" || true
  [ "$line" = ready ] || { cat "$work/client.err" >&2; echo "client did not get $n TLS connections to port $port" >&2; exit 1; }
  rss_mib "$pid"
  exec {CLIENT[1]}>&-
  wait "$CLIENT_PID" 2>/dev/null || true
}

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A results
proxies=(sluice nginx haproxy)
for run in $(seq "$RUNS"); do
  for ((k = 0; k < ${#proxies[@]}; k++)); do
    who=${proxies[$(((k + run - 1) % ${#proxies[@]}))]}   # the order rotates per run
    start_proxy "$who"
    sleep 0.3
    base=$(rss_mib "$PROXY_PID")
    idle=$(measure "$PROXY_PID" "$PROXY_PORT" "$IDLE")
    stop_proxy
    results[$who-base]+="$base " results[$who-idle]+="$idle "
    echo "run $run $who: start $base idle $idle ($(tail -n1 "$work/client.err"))" >&2
  done
done

printf '\nRSS in MiB, median of %s runs (one worker each; %s idle keep-alive TLS connections, each after a full handshake and one request):\n' \
  "$RUNS" "$IDLE"
printf '%-8s | %8s | %10s | %14s\n' proxy start idle "KiB/idle conn"
for who in "${proxies[@]}"; do
  b=$(median <<<"${results[$who-base]}") i=$(median <<<"${results[$who-idle]}")
  printf '%-8s | %8s | %10s | %14s\n' "$who" "$b" "$i" \
    "$(awk -v i="$i" -v b="$b" -v n="$IDLE" 'BEGIN { printf "%.1f", (i - b) * 1024 / n }')"
done
