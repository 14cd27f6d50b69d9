#!/usr/bin/env bash
# Memory per client connection, Sluice beside nginx in one run: the resident set (RSS,
# summed over the process and its children, so nginx's master and worker) of each proxy
# when idle, with IDLE keep-alive client connections open (each has made one request and
# waits), and with UPLOADS clients part-way through a streamed upload at once (headers and
# the first CHUNK bytes of a 16 MiB body sent, the rest held back). One worker each, their
# default request buffering (Sluice reads ahead up to proxy.request_buffer_bytes, 128 KiB, then
# streams the body to the upstream, which takes it; nginx buffers to memory up to
# client_body_buffer_size, then to a temporary file).
#
# usage: bench/conn_memory.sh    env: IDLE (10000), UPLOADS (1000), CHUNK (262144),
#        RUNS (3), SLUICE_BIN (build/sluice). Prints the median of RUNS runs, in MiB.
# needs: nginx, python3; root, or a hard limit on open files above IDLE + 1000.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
IDLE=${IDLE:-10000}
UPLOADS=${UPLOADS:-1000}
CHUNK=${CHUNK:-262144}
RUNS=${RUNS:-3}
SLUICE_BIN=${SLUICE_BIN:-$here/build/sluice}
[ -x "$SLUICE_BIN" ] || { echo "conn_memory: $SLUICE_BIN not built" >&2; exit 1; }
want=$((IDLE * 2 + 4096)) hard=$(ulimit -Hn)
[ "$hard" = unlimited ] || [ "$hard" -ge "$want" ] || want=$hard
[ "$want" -ge $((IDLE + 2048)) ] || { echo "conn_memory: open files limit $hard is too low for IDLE=$IDLE" >&2; exit 1; }
ulimit -n "$want"

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

read -r up_port sl_port sl_admin ng_port < <(python3 -c '
import socket
s=[socket.socket() for _ in range(4)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')

wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }

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
    client_max_body_size 64m;
    $2
}
EOF
}

# /up reads the upload as it comes (nginx buffers a body before proxying it, and the 16 MiB
# never arrive): an upstream taking the body, so that the proxy in front streams it. An
# upstream answering at once would have Sluice answer the client early and linger instead.
nginx_conf "$work/up" "server { listen 127.0.0.1:$up_port; location / { return 200 \"ok\\n\"; }
    location /up { proxy_pass http://127.0.0.1:$up_port/; } }"
nginx -p "$work/up" -c "$work/up/nginx.conf" -g 'daemon off;' & pids+=($!)
nginx_conf "$work/ng" "upstream b { server 127.0.0.1:$up_port; keepalive 64; }
    server { listen 127.0.0.1:$ng_port; location / { proxy_pass http://b; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
cat >"$work/sluice.yaml" <<EOF
server: { listen: "127.0.0.1:$sl_port", threads: 1, max_connections: $((want - 100)), idle_timeout: 300s, max_body_bytes: 64MiB }
admin: { listen: "127.0.0.1:$sl_admin" }
upstream: { url: "http://127.0.0.1:$up_port" }
log: { level: warn, access: { path: off } }
EOF

# A fresh proxy per measurement: memory an allocator keeps after connections close would
# otherwise count in the next one. Sets PROXY_PID and PROXY_PORT.
start_proxy() {
  if [ "$1" = sluice ]; then
    "$SLUICE_BIN" --config "$work/sluice.yaml" 2>>"$work/sluice.err" &
    PROXY_PORT=$sl_port
  else
    nginx -p "$work/ng" -c "$work/ng/nginx.conf" -g 'daemon off;' &
    PROXY_PORT=$ng_port
  fi
  PROXY_PID=$!
  pids+=("$PROXY_PID")
  wait_port "$PROXY_PORT"
}
stop_proxy() { kill -TERM "$PROXY_PID"; wait "$PROXY_PID" 2>/dev/null || true; }
wait_port "$up_port"

# The client: opens the connections, prints "ready" once all are in the wanted state, then
# holds them until its standard input closes. Bounded: gives up after 120 s.
cat >"$work/client.py" <<'EOF'
import asyncio, sys
port, mode, n, chunk = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
async def one(conns):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    if mode == "idle":
        w.write(b"GET / HTTP/1.1\r\nHost: b\r\n\r\n")
        await r.readuntil(b"ok\n")
    else:
        w.write(b"POST /up HTTP/1.1\r\nHost: b\r\nContent-Length: 16777216\r\n\r\n" + b"x" * chunk)
        await w.drain()
    conns.append(w)
async def main():
    conns, sem = [], asyncio.Semaphore(200)
    async def limited():
        async with sem: await one(conns)
    await asyncio.wait_for(asyncio.gather(*(limited() for _ in range(n))), 120)
    await asyncio.sleep(1)  # the proxy has read what was sent (its buffers are filled)
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

measure() {  # measure PID PORT MODE N -> RSS with N connections in MODE open
  local pid=$1 port=$2 mode=$3 n=$4
  coproc CLIENT { python3 "$work/client.py" "$port" "$mode" "$n" "$CHUNK"; }
  local line
  read -r -t 150 line <&"${CLIENT[0]}" || true
  [ "$line" = ready ] || { echo "client did not get $n $mode connections to port $port" >&2; exit 1; }
  rss_mib "$pid"
  exec {CLIENT[1]}>&-
  wait "$CLIENT_PID" 2>/dev/null || true
}

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A results
for run in $(seq "$RUNS"); do
  for who in sluice nginx; do
    start_proxy $who
    base=$(rss_mib "$PROXY_PID")
    idle=$(measure "$PROXY_PID" "$PROXY_PORT" idle "$IDLE")
    stop_proxy
    start_proxy $who
    upload=$(measure "$PROXY_PID" "$PROXY_PORT" upload "$UPLOADS")
    stop_proxy
    results[$who-base]+="$base " results[$who-idle]+="$idle " results[$who-upload]+="$upload "
    echo "run $run $who: start $base idle $idle upload $upload" >&2
  done
done

printf '\nRSS in MiB, median of %s runs (one worker each; idle: %s keep-alive connections after one request; upload: %s clients with %s bytes of a body sent):\n' \
  "$RUNS" "$IDLE" "$UPLOADS" "$CHUNK"
printf '%-8s | %8s | %10s | %10s | %14s | %14s\n' proxy start idle upload "KiB/idle conn" "KiB/upload"
for who in sluice nginx; do
  b=$(median <<<"${results[$who-base]}") i=$(median <<<"${results[$who-idle]}") u=$(median <<<"${results[$who-upload]}")
  printf '%-8s | %8s | %10s | %10s | %14s | %14s\n' $who "$b" "$i" "$u" \
    "$(awk -v i="$i" -v b="$b" -v n="$IDLE" 'BEGIN { printf "%.1f", (i - b) * 1024 / n }')" \
    "$(awk -v u="$u" -v b="$b" -v n="$UPLOADS" 'BEGIN { printf "%.1f", (u - b) * 1024 / n }')"
done
