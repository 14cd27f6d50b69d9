# shellcheck shell=bash
# bench/run.sh helpers: the upstream, and config writers + starters for the proxies the
# contenders are made of (Sluice, nginx, HAProxy). Each start_* writes its config under
# $WORK, checks it, starts the server as a child (start_bg), waits until it is ready and
# registers it (add_contender NAME PID PORT, with the NAME's declared expected statuses).

nginx_common() {  # nginx_common NAME -> main-context lines shared by all our nginx instances
  local d="$WORK/$1"
  mkdir -p "$d"
  cat <<EOF
worker_processes 1;
worker_rlimit_nofile $NOFILE;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections $MAXCONN; multi_accept on; }
EOF
}
nginx_http_common() {
  local d="$WORK/$1"
  cat <<EOF
    access_log off;
    client_body_temp_path $d/client_body;
    proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi;
    scgi_temp_path $d/scgi;
    keepalive_timeout 65s;
    keepalive_requests 1000000;
EOF
}

UP_PORT="" UP_PID=""
start_upstream() {  # the common upstream: an nginx with 1 worker returning $UPSTREAM_BODY
  start_nginx_upstream upstream "$UP_PORT"
  # shellcheck disable=SC2034  # read by contenders/direct.sh
  UP_PID=$BG_PID
}

# start_nginx_upstream NAME PORT [LOCATION_LINE]: an nginx with 1 worker answering every
# request with 200 and $UPSTREAM_BODY (LOCATION_LINE, e.g. an add_header, before the return);
# sets BG_PID once it listens
start_nginx_upstream() {
  local name=$1 port=$2 extra=${3:-} conf="$WORK/$1.conf"
  {
    nginx_common "$name"
    echo "http {"
    nginx_http_common "$name"
    cat <<EOF
    server {
        listen 127.0.0.1:$port;
        location / { default_type text/plain; $extra return 200 "$UPSTREAM_BODY\n"; }
    }
}
EOF
  } >"$conf"
  start_bg "$name" other -- nginx -p "$WORK/$name" -e "$WORK/$name/error.log" -c "$conf" -g 'daemon off;'
  wait_port "$port" "$BG_PID" "$name"
}

# ---------------------------------------------------------------- a pool of upstreams
# The pool contenders (needs=pool) proxy to POOL_SIZE upstreams like the common one, each on
# a free port, each naming itself in an X-Upstream header (1..POOL_SIZE) so that a check can
# see how requests are spread. BACKENDS="HOST:PORT ..." set around a call (`BACKENDS=$(
# pool_backends) start_nginx_proxy ...`) makes the config writers below proxy to those
# servers as a pool with the bench's pool settings: round robin, a failed request tried once
# more on another server, each proxy's passive failure detection (see bench/README.md).
POOL_SIZE=3
POOL_PORTS=() POOL_PIDS=()
start_pool() {  # start_pool: upstreams pool-1..POOL_SIZE on fresh free ports (sets POOL_PORTS, POOL_PIDS)
  local i
  read -ra POOL_PORTS <<<"$(free_ports "$POOL_SIZE")"
  ((${#POOL_PORTS[@]} == POOL_SIZE)) || die "could not find free ports for the pool"
  POOL_PIDS=()
  for ((i = 0; i < POOL_SIZE; i++)); do
    start_nginx_upstream "pool-$((i + 1))" "${POOL_PORTS[$i]}" "add_header X-Upstream $((i + 1)) always;"
    POOL_PIDS+=("$BG_PID")
  done
}

need_pool() {  # need_pool: the pool, started once (bench/run.sh, before a contender with needs=pool)
  ((${#POOL_PIDS[@]} == 0)) || return 0
  start_pool
  say "pool: $POOL_SIZE nginx upstreams (1 worker each, the same fixed body) on 127.0.0.1 ports ${POOL_PORTS[*]}"
}

pool_backends() {  # pool_backends -> "127.0.0.1:PORT ..." of the pool
  local p addrs=()
  for p in "${POOL_PORTS[@]}"; do addrs+=("127.0.0.1:$p"); done
  echo "${addrs[*]}"
}

# check_pool_spread NAME PORT: 10 x POOL_SIZE GETs through the proxy on one keep-alive
# connection; each must be a 200, every pool server must have answered some (X-Upstream)
check_pool_spread() {
  local name=$1 n=$((10 * POOL_SIZE)) got counts i
  got=$(python3 - "$2" "$n" <<'EOF'
import sys, http.client, collections
seen = collections.Counter(); bad = []
try:
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
    for _ in range(int(sys.argv[2])):
        c.request("GET", "/"); r = c.getresponse(); r.read()
        if r.status == 200: seen[r.getheader("X-Upstream", "none")] += 1
        else: bad.append(str(r.status))
except Exception as e:
    bad.append(repr(e))
print(" ".join(f"{k}:{v}" for k, v in sorted(seen.items())) + "\t" + " ".join(bad[:5]))
EOF
)
  counts=${got%%$'\t'*}
  [ -z "${got#*$'\t'}" ] || { show_log "$name"; die "$name: not 200 in the spread check: ${got#*$'\t'} (server:count $counts)"; }
  for ((i = 1; i <= POOL_SIZE; i++)); do
    [[ " $counts" == *" $i:"* ]] || { show_log "$name"; die "$name: pool server $i answered none of $n requests (server:count $counts)"; }
  done
  say "check: $name spreads $n requests on one connection over the pool (server:count) $counts"
}

# ---------------------------------------------------------------- nginx
# nginx_servers: the server lines of start_nginx_proxy's upstream block: the common upstream,
# or the BACKENDS as a pool (round robin and max_fails=1 fail_timeout=10s, nginx's defaults:
# a server that failed once is skipped for 10 s)
nginx_servers() {
  local a
  for a in ${BACKENDS:-127.0.0.1:$UP_PORT}; do printf '        server %s;\n' "$a"; done
}
# for a pool, nginx's default written out: a request that failed (connect error, timeout)
# before any byte of an answer is tried on the next server
nginx_pool_location() { [ -z "${BACKENDS:-}" ] || echo "proxy_next_upstream error timeout;"; }

start_nginx_proxy() {  # start_nginx_proxy NAME PORT [HTTP_EXTRA [LOCATION_EXTRA [LISTEN_OPTS [SERVER_EXTRA]]]]
  local name=$1 port=$2 http_extra=${3:-} location_extra=${4:-} listen_opts=${5:-} server_extra=${6:-}
  local conf="$WORK/$1.conf"
  {
    nginx_common "$name"
    echo "http {"
    nginx_http_common "$name"
    [ -n "$http_extra" ] && printf '    %s\n' "$http_extra"
    cat <<EOF
    upstream backend {
$(nginx_servers)
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$port$listen_opts;
        $server_extra
        location / {
            $location_extra
            $(nginx_pool_location)
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
  } >"$conf"
  nginx -t -q -p "$WORK/$name" -e "$WORK/$name/error.log" -c "$conf" >&2 || die "$name: nginx config check failed"
  start_bg "$name" proxy -- nginx -p "$WORK/$name" -e "$WORK/$name/error.log" -c "$conf" -g 'daemon off;'
  wait_port "$port" "$BG_PID" "$name"
  add_contender "$name" "$BG_PID" "$port"
}

# ---------------------------------------------------------------- HAProxy
# haproxy_servers: start_haproxy's backend: the common upstream, or the BACKENDS as a pool:
# round robin, a failed connect retried once (retries 1) on another server (option
# redispatch); no health checks (a server is never marked down, its connects fail fast)
haproxy_servers() {
  local a i=0
  [ -z "${BACKENDS:-}" ] || printf '    %s\n' "balance roundrobin" "retries 1" "option redispatch"
  for a in ${BACKENDS:-127.0.0.1:$UP_PORT}; do i=$((i + 1)); printf '    server up%d %s\n' "$i" "$a"; done
}

start_haproxy() {  # start_haproxy NAME PORT [BIND_OPTS]: mode http, keep-alive, http-reuse always
  local name=$1 port=$2 bind_opts=${3:-} conf="$WORK/$1.cfg"
  cat >"$conf" <<EOF
global
    nbthread 1
    maxconn $MAXCONN
    pidfile $WORK/$name.pid

defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
    timeout http-keep-alive 30s

frontend fe
    bind 127.0.0.1:$port$bind_opts
    default_backend be

backend be
$(haproxy_servers)
EOF
  haproxy -c -q -f "$conf" >&2 || die "$name: haproxy config check failed"
  start_bg "$name" proxy -- haproxy -db -f "$conf"
  wait_port "$port" "$BG_PID" "$name"
  add_contender "$name" "$BG_PID" "$port"
}

# ---------------------------------------------------------------- Sluice
ensure_sluice() {  # builds Sluice if SLUICE_BIN is missing
  [ -x "$SLUICE_BIN" ] && return 0
  log "$SLUICE_BIN not found: building Sluice (Release)"
  { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF &&
    cmake --build build -j2 --target sluice; } >&2 || die "building sluice failed"
  SLUICE_BIN=build/sluice
  [ -x "$SLUICE_BIN" ] || die "build finished but $SLUICE_BIN is missing"
}

# sluice_upstream: the upstream block of a Sluice: the common upstream, or the BACKENDS as the
# pool "default" with the issue's settings written out (they are also Sluice's defaults): smooth
# weighted round robin, one retry on another server, a server ejected for 30 s after 5
# consecutive connect errors or 5xx
sluice_upstream() {
  if [ -z "${BACKENDS:-}" ]; then
    echo "upstream: { url: \"http://127.0.0.1:$UP_PORT\", max_idle_per_worker: 256 }"
    return 0
  fi
  local a
  echo "upstream:"
  echo "  servers:"
  for a in $BACKENDS; do echo "    - { url: \"http://$a\", weight: 1 }"; done
  echo "  balance: round_robin"
  echo "  retries: 1"
  echo "  health: { passive: { eject_after: 5, eject_for: 30s } }"
  echo "  max_idle_per_worker: 256"
}

start_sluice() {  # start_sluice NAME PORT ADMIN_PORT [EXTRA_YAML [ACCESS_LOG]]
  local name=$1 port=$2 admin_port=$3 extra=${4:-} access=${5:-off} conf="$WORK/$1.yaml"
  ensure_sluice
  # access log off unless asked (the nginx and HAProxy contenders log nothing either, but
  # the -logged pair); no routes = no limit
  cat >"$conf" <<EOF
server: { listen: "127.0.0.1:$port", threads: 1, max_connections: 10000 }
admin:  { listen: "127.0.0.1:$admin_port" }
$(sluice_upstream)
log: { level: warn, access: { path: "$access" } }
$extra
EOF
  "$SLUICE_BIN" --check --config "$conf" >/dev/null || die "$name: sluice config check failed ($conf)"
  SLUICE_HASH_SECRET=$HASH_SECRET start_bg "$name" proxy -- "$SLUICE_BIN" --config "$conf"
  wait_log_line "$WORK/$name.err.log" "proxy listening on 127.0.0.1:$port" "$BG_PID" "$name"
  add_contender "$name" "$BG_PID" "$port"
}

# ---------------------------------------------------------------- TLS
# The same TLS settings for the three TLS contenders: the bench's EC P-256 certificate
# ($TLS_CERT), TLS 1.2 and 1.3, Sluice's TLS 1.2 suites (ECDHE + AEAD; TLS 1.3's are
# OpenSSL's defaults everywhere), ALPN http/1.1, session tickets on (each server's own
# ticket keys), no server-side session cache where it can be turned off.
TLS12_CIPHERS=ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305

start_nginx_tls() {  # start_nginx_tls NAME PORT
  start_nginx_proxy "$1" "$2" "" "" " ssl" "ssl_certificate $TLS_CERT;
        ssl_certificate_key $TLS_KEY;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ciphers $TLS12_CIPHERS;
        ssl_session_tickets on;
        ssl_session_cache none;"
}

start_haproxy_tls() {  # start_haproxy_tls NAME PORT
  start_haproxy "$1" "$2" " ssl crt $TLS_BOTH ssl-min-ver TLSv1.2 alpn http/1.1 ciphers $TLS12_CIPHERS"
}

start_sluice_tls() {  # start_sluice_tls NAME TLS_PORT ADMIN_PORT: start_sluice's config, plus server.tls
  local name=$1 port=$2 admin_port=$3 conf="$WORK/$1.yaml"
  ensure_sluice
  cat >"$conf" <<EOF
server:
  listen: "127.0.0.1:0"
  threads: 1
  max_connections: 10000
  tls:
    listen: "127.0.0.1:$port"
    certificates: [ { cert_file: "$TLS_CERT", key_file: "$TLS_KEY" } ]
    min_version: "1.2"
    session_tickets: true
admin:  { listen: "127.0.0.1:$admin_port" }
$(sluice_upstream)
log: { level: warn, access: { path: "off" } }
EOF
  "$SLUICE_BIN" --check --config "$conf" >/dev/null || die "$name: sluice config check failed ($conf)"
  SLUICE_HASH_SECRET=$HASH_SECRET start_bg "$name" proxy -- "$SLUICE_BIN" --config "$conf"
  wait_log_line "$WORK/$name.err.log" "TLS listening on 127.0.0.1:$port" "$BG_PID" "$name"
  add_contender "$name" "$BG_PID" "$port"
}

# The policy of the "pass" contenders (sluice-limit-pass and the Redis stores): one client, so
# one identifier, a fixed and a sliding tier far above any rate wrk reaches.
pass_policy() {
  printf '%s\n' "response: { headers: $LIMIT_HEADERS }
policies:
  pass:
    ip:
      - {limit: 1000000000, per: 1s, algorithm: fixed}
      - {limit: 1000000000, per: 1m, algorithm: sliding}
routes:
  - {match: {path_prefix: /}, policy: pass}"
}

# start_sluice_store NAME PROXY_PORT ADMIN_PORT TYPE NODE: sluice-limit-pass's policy on a
# Redis store (TYPE redis or redis-cluster, NODE its address or a seed), then waits for
# /readyz (config loaded, every needed Redis node connected). Its sluice_redis_* counters
# are read around each run (C_METRICS).
start_sluice_store() {
  local name=$1 type=$4 node=$5
  start_sluice "$name" "$2" "$3" "store:
  type: $type
  redis: { nodes: [\"$node\"], timeout: 50ms }
  on_error: allow
$(pass_policy)"
  C_METRICS[$name]=$3
  local i got=""
  for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
    got=$(http_get "http://127.0.0.1:$3/readyz"); [ "${got%%$'\t'*}" = 200 ] && return 0
    sleep 0.1
  done
  show_log "$name"; die "$name: /readyz not 200 within ${READY_TIMEOUT}s (last: $got)"
}
