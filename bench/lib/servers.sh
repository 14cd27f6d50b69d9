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
  local conf="$WORK/upstream.conf"
  {
    nginx_common upstream
    echo "http {"
    nginx_http_common upstream
    cat <<EOF
    server {
        listen 127.0.0.1:$UP_PORT;
        location / { default_type text/plain; return 200 "$UPSTREAM_BODY\n"; }
    }
}
EOF
  } >"$conf"
  start_bg upstream other -- nginx -p "$WORK/upstream" -e "$WORK/upstream/error.log" -c "$conf" -g 'daemon off;'
  UP_PID=$BG_PID
  wait_port "$UP_PORT" "$UP_PID" upstream
}

# ---------------------------------------------------------------- nginx
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
        server 127.0.0.1:$UP_PORT;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$port$listen_opts;
        $server_extra
        location / {
            $location_extra
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
    server up 127.0.0.1:$UP_PORT
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

start_sluice() {  # start_sluice NAME PORT ADMIN_PORT [EXTRA_YAML [ACCESS_LOG]]
  local name=$1 port=$2 admin_port=$3 extra=${4:-} access=${5:-off} conf="$WORK/$1.yaml"
  ensure_sluice
  # access log off unless asked (the nginx and HAProxy contenders log nothing either, but
  # the -logged pair); no routes = no limit
  cat >"$conf" <<EOF
server: { listen: "127.0.0.1:$port", threads: 1, max_connections: 10000 }
admin:  { listen: "127.0.0.1:$admin_port" }
upstream: { url: "http://127.0.0.1:$UP_PORT", max_idle_per_worker: 256 }
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
upstream: { url: "http://127.0.0.1:$UP_PORT", max_idle_per_worker: 256 }
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
